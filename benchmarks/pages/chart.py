"""The throughput chart of docs/benchmarks.md (PNG, matplotlib; drawn only where matplotlib is installed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pages.throughput import CORE_LABELS, ENGINE_LABELS, pump_row, side_spread

# ---- the chart ------------------------------------------------------------------------------------------
COLORS = {"project": "#1f6fb4", "raw": "#9a9a9a", "pump": "#5aa0dc", "peer": "#e08a2c"}


def chart_bars(doc: dict[str, Any], engine: str) -> list[tuple[str, dict[str, float], str]]:
    bars = []
    for row in doc.get("core", []):
        if row["engine"] == engine:
            operation, batch, consumers = CORE_LABELS.get(
                row["case"], (row["case"], row["batch"], row["consumers"])
            )
            short = f"{operation} x{batch}, {consumers}c"
            bars.append((f"{short}: raw", side_spread(row, "raw"), "raw"))
            bars.append((f"{short}: sqlqueue", side_spread(row, "project"), "project"))
    pump = pump_row(doc, engine)
    if pump:
        bars.append(("MessagePump, concurrency 4", pump["msgs_per_s"], "pump"))
    for peer in doc.get("peers", []):
        if peer["engine"] == engine:
            name = {"kombu": "kombu-sqla", "persistqueue": "persist-queue"}.get(peer["peer"], peer["peer"])
            bars.append(
                (f"{name} send x{peer['send_batch']}", peer["send_msgs_per_s"], "peer"),
            )
            bars.append(
                (
                    f"{name} receive x{peer['receive_batch']}, {peer['concurrency']}c",
                    peer["receive_msgs_per_s"],
                    "peer",
                )
            )
    return bars


def draw_chart(doc: dict[str, Any], image: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    engines = [engine for engine in ("postgresql", "sqlite") if chart_bars(doc, engine)]
    heights = [len(chart_bars(doc, engine)) for engine in engines]
    figure, axes = plt.subplots(
        len(engines),
        1,
        figsize=(10, 0.32 * sum(heights) + 1.6 * len(engines)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for axis, engine in zip(axes[:, 0], engines, strict=True):
        bars = chart_bars(doc, engine)
        labels = [label for label, _, _ in bars]
        medians = [spread["median"] for _, spread, _ in bars]
        lows = [spread["median"] - spread["min"] for _, spread, _ in bars]
        highs = [spread["max"] - spread["median"] for _, spread, _ in bars]
        positions = list(range(len(bars)))[::-1]
        axis.barh(
            positions,
            medians,
            xerr=[lows, highs],
            color=[COLORS[kind] for _, _, kind in bars],
            error_kw={"ecolor": "#333333", "capsize": 2, "linewidth": 0.8},
        )
        for position, median, (_, spread, _) in zip(positions, medians, bars, strict=True):
            axis.text(max(median, spread["max"]) * 1.1, position, f"{median:,.0f}", va="center", fontsize=7)
        axis.set_yticks(positions, labels, fontsize=8)
        axis.set_xscale("log")
        axis.set_xlim(left=max(min(medians) / 3, 1), right=max(spread["max"] for _, spread, _ in bars) * 4)
        axis.set_title(
            f"{ENGINE_LABELS[engine]}: messages per second (log scale), median and min-max", fontsize=10
        )
        axis.grid(axis="x", which="major", linewidth=0.4, alpha=0.6)
    meta = doc["meta"]
    figure.legend(
        handles=[
            Patch(color=COLORS["project"], label="airflow-provider-sqlqueue"),
            Patch(color=COLORS["raw"], label="raw driver, same SQL"),
            Patch(color=COLORS["pump"], label="MessagePump"),
            Patch(color=COLORS["peer"], label="peer library"),
        ],
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    figure.suptitle(
        f"1 KB messages, N={meta['n']:,} (per-message cases {meta['n_single']:,}), "
        f"{meta['repeat']} round{'s' if meta['repeat'] > 1 else ''}, {meta['machine']['cpus']} CPUs, "
        f"{meta['date'][:10]}",
        fontsize=9,
    )
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    image.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image, dpi=110)
    plt.close(figure)


def chart_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
