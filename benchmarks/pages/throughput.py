"""The throughput run's figures (benchmarks/run.py's JSON): reading its rows, the targets of issue 7 as
ratios within one run, and the summary run.py prints. Nothing is measured here."""

from __future__ import annotations

import math
from typing import Any

ENGINE_LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}
CORE_LABELS = {
    "send": ("send", 1, 1),
    "send_batch": ("send_batch", 100, 1),
    "receive_1c": ("receive", 1, 1),
    "receive_4c": ("receive", 1, 4),
    "receive_batch_1c": ("receive_batch", 100, 1),
    "receive_batch_4c": ("receive_batch", 100, 4),
}
PEER_NAMES = {
    "pgqueuer": "pgqueuer",
    "procrastinate": "procrastinate",
    "kombu": "kombu (SQLAlchemy transport)",
    "persistqueue": "persist-queue (SQLiteAckQueue)",
}


# ---- reading the figures ------------------------------------------------------------------------------
def core_row(doc: dict[str, Any] | None, engine: str, case: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("core", []):
        if row["engine"] == engine and row["case"] == case:
            return row  # type: ignore[no-any-return]
    return None


def peer_row(doc: dict[str, Any] | None, peer: str, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("peers", []):
        if row["peer"] == peer and row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def pump_row(doc: dict[str, Any] | None, engine: str) -> dict[str, Any] | None:
    for row in (doc or {}).get("pump", []):
        if row["engine"] == engine:
            return row  # type: ignore[no-any-return]
    return None


def handler_rows(doc: dict[str, Any] | None, engine: str) -> dict[str, dict[str, Any]]:
    """The handler-throughput section's rows of ``engine`` by case (raw_receive_batch, pump_batch_1, ...)."""
    return {
        row["case"]: row
        for row in ((doc or {}).get("handlers") or {}).get("rows", [])
        if row["engine"] == engine
    }


def wakeup_rows(doc: dict[str, Any] | None, engine: str) -> dict[str, dict[str, Any]]:
    """The wake-up section's rows of ``engine`` by case (pump_push, pump_poll, pgqueuer)."""
    return {
        row["case"]: row
        for row in ((doc or {}).get("wakeup") or {}).get("rows", [])
        if row["engine"] == engine
    }


def peek_rows(scale: dict[str, Any] | None, engine: str) -> dict[int, dict[str, Any]]:
    for result in (scale or {}).get("scale", []):
        if result["engine"] == engine:
            return {entry["rows"]: entry for entry in result["peek"]}
    return {}


def is_package_drain(drain: dict[str, Any]) -> bool:
    """Whether a scale drain ran as the package sets things up: not from a table reset to the server's
    storage defaults (``--server-default-storage``), not by a session left at the server's
    ``backend_flush_after`` (``--no-write-back``), not from a table whose autovacuum sleeps
    (``--throttled-vacuum``). Autovacuum on or off is the caller's question."""
    return (
        drain.get("package_storage_parameters") is not False
        and drain.get("package_write_back") is not False
        and not drain.get("throttled_vacuum")
    )


def package_drain(scale: dict[str, Any] | None, rows: int) -> dict[str, Any] | None:
    """The PostgreSQL drain of ``rows`` from a table as the package creates it (autovacuum on, its own
    storage parameters) by a session as the package sets it up, if the scale run has one."""
    for result in (scale or {}).get("scale", []):
        if result["engine"] != "postgresql":
            continue
        for drain in result["drains"]:
            if drain["rows"] == rows and drain["autovacuum"] and is_package_drain(drain):
                return drain
    return None


def side_spread(row: dict[str, Any], side: str) -> dict[str, float]:
    """Median and min-max msgs/s of one side (raw or project) of a core row, from its rounds."""
    values = [sample[side]["msgs_per_s"] for sample in row["rounds"]]
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1]}


# ---- targets --------------------------------------------------------------------------------------------
def compute_targets(
    doc: dict[str, Any] | None, scale: dict[str, Any] | None, *, issue18: bool = False
) -> list[dict[str, Any]]:
    """Every target of issue 7 as a ratio within one run: value, threshold, PASS / MISS / not measured;
    with ``issue18``, also issue 18's (SQLite's one-message receive, the flat PostgreSQL drains), which the
    older runs of docs/history/performance-tuning.md did not measure. A peer target also carries its
    ``ceiling``: the raw driver's msgs/s over the peer's, and ``ceiling_runs``, what that raw side ran."""
    targets: list[dict[str, Any]] = []

    def add(
        name: str,
        value: float | None,
        threshold: float,
        detail: str,
        at_most: bool = False,
        unit: str = "x",
        unavailable: str = "",
        ceiling: tuple[float, str] | None = None,
    ) -> None:
        if value is None:
            status = "not available in this build" if unavailable else "not measured"
            detail = unavailable.removeprefix("not available in this build: ") or detail
        else:
            status = "PASS" if (value <= threshold if at_most else value >= threshold) else "MISS"
        targets.append(
            {
                "target": name,
                "value": value,
                "threshold": threshold,
                "op": "<=" if at_most else ">=",
                "status": status,
                "detail": detail,
                "unit": unit,
                **({"ceiling": ceiling[0], "ceiling_runs": ceiling[1]} if ceiling else {}),
            }
        )

    ceilings: dict[str, tuple[float, str]] = {}

    def handler_ratio(engine: str, case: str, against: str) -> tuple[float | None, str, str]:
        """(value, detail, why not available) of a handler-section row against another of its rows: the
        median of per-round ratios against raw receive_batch (run in the same round), medians against a
        peer (their runs are not paired)."""
        rows = handler_rows(doc, engine)
        ours, theirs = rows.get(case), rows.get(against)
        if ours is None or theirs is None:
            return None, "", ""
        if not ours.get("available"):
            return None, "", ours.get("reason", "")
        if not theirs.get("available"):
            return None, f"{against}: {theirs.get('reason', 'not run')}", ""
        mine, other = ours["msgs_per_s"]["median"], theirs["msgs_per_s"]["median"]
        if against == "raw_receive_batch":
            ratios = [
                a["msgs_per_s"] / b["msgs_per_s"]
                for a, b in zip(ours["rounds"], theirs["rounds"], strict=False)
            ]
            ratios.sort()
            middle = len(ratios) // 2
            value = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
            return (
                value,
                (
                    f"pump {mine:,.0f} / raw receive_batch {other:,.0f} msgs/s, N={ours['n']:,} "
                    f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f})"
                ),
                "",
            )
        raw = rows.get("raw_receive_batch")
        ceiling = ""
        if raw and raw.get("available"):
            ceilings[case] = (
                raw["msgs_per_s"]["median"] / other,
                "receive_batch in one process, no handler,",
            )
            ceiling = f"; ceiling: raw receive_batch, no handler, reaches {ceilings[case][0]:.2f}x"
        return mine / other, f"pump {mine:,.0f} / {against} {other:,.0f} msgs/s, N={ours['n']:,}{ceiling}", ""

    def core_ratio(engine: str, case: str) -> tuple[float | None, str]:
        row = core_row(doc, engine, case)
        if row is None:
            return None, ""
        return row["ratio"], (
            f"project {row['project_msgs_per_s']:,.0f} / raw {row['raw_msgs_per_s']:,.0f} msgs/s "
            f"(rounds {row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
        )

    def peer_ratio(
        engine: str, case: str, peer: str, phase: str, raw_runs: str = ""
    ) -> tuple[float | None, str]:
        row, other = core_row(doc, engine, case), peer_row(doc, peer, engine)
        if row is None or other is None:
            return None, "" if row is None else f"{peer} not run"
        theirs = other[f"{phase}_msgs_per_s"]["median"]
        ceiling = row["raw_msgs_per_s"] / theirs
        ceilings[f"{engine}:{case}:{peer}"] = (ceiling, raw_runs or "the same statements")
        raw = (
            f"the raw driver running {raw_runs} reaches {ceiling:.2f}x"
            if raw_runs
            else f"ceiling: the raw driver running the same statements reaches {ceiling:.2f}x"
        )
        return row["project_msgs_per_s"] / theirs, (
            f"project {row['project_msgs_per_s']:,.0f} / {peer} {theirs:,.0f} msgs/s; {raw}"
        )

    value, detail = core_ratio("postgresql", "send_batch")
    add("PostgreSQL batch send (100/commit) vs raw multi-row INSERT", value, 0.8, detail)
    value, detail = peer_ratio(
        "postgresql",
        "send_batch",
        "pgqueuer",
        "send",
        "the multi-row INSERT (the project sends by binary COPY)",
    )
    add(
        "PostgreSQL batch send vs pgqueuer batched enqueue (100)",
        value,
        1.5,
        detail,
        ceiling=ceilings.get("postgresql:send_batch:pgqueuer"),
    )
    for consumers in (1, 4):
        value, detail = core_ratio("postgresql", f"receive_batch_{consumers}c")
        add(
            f"PostgreSQL batch receive (100), {consumers} consumer{'s' if consumers > 1 else ''}, vs raw "
            "DELETE ... LIMIT 100 RETURNING",
            value,
            0.8,
            detail,
        )
    if (doc or {}).get("handlers"):
        value, detail, unavailable = handler_ratio("postgresql", "pump_batch_100", "pgqueuer")
        add(
            "PostgreSQL batching pump (batch 100, concurrency 4) vs pgqueuer's consumer (batch 100), "
            "handler to handler",
            value,
            2.0,
            detail,
            unavailable=unavailable,
            ceiling=ceilings.get("pump_batch_100") if value is not None else None,
        )
        for engine in ("postgresql", "sqlite"):
            value, detail, unavailable = handler_ratio(engine, "pump_batch_100", "raw_receive_batch")
            add(
                f"{ENGINE_LABELS[engine]} batching pump (batch 100, concurrency 4) vs raw "
                "receive_batch (100)",
                value,
                0.5,
                detail,
                unavailable=unavailable,
            )
    if (doc or {}).get("wakeup"):
        push = wakeup_rows(doc, "postgresql").get("pump_push") or {}
        measured = bool(push.get("available"))
        for key, wanted in (("p50_ms", 20.0), ("p95_ms", 50.0)):
            add(
                f'PostgreSQL wake-up, commit to handler, {key[:3]} with push (wake_up="auto")',
                push[key] if measured else None,
                wanted,
                f"{push['sends']} sends from another process after {push['idle_s']:g} s idle; max "
                f"{push['max_ms']:.1f} ms"
                if measured
                else "",
                at_most=True,
                unit="ms",
                unavailable="" if measured else push.get("reason", ""),
            )
    value, detail = core_ratio("postgresql", "receive_4c")
    add("PostgreSQL single-message receive, 4 consumers, vs raw", value, 0.9, detail)
    for engine in ("postgresql", "sqlite"):
        value, detail = peer_ratio(engine, "receive_4c", "kombu", "receive")
        add(
            f"{ENGINE_LABELS[engine]} single-message receive, 4 consumers, vs kombu-sqlalchemy (4 consumers)",
            value,
            10.0,
            detail,
            ceiling=ceilings.get(f"{engine}:receive_4c:kombu"),
        )
    value, detail = core_ratio("sqlite", "send_batch")
    add("SQLite batch send (100/commit) vs raw sqlite3", value, 0.8, detail)
    for consumers in (1, 4):
        value, detail = core_ratio("sqlite", f"receive_batch_{consumers}c")
        add(
            f"SQLite batch receive (100), {consumers} consumer{'s' if consumers > 1 else ''}, vs raw sqlite3",
            value,
            0.8,
            detail,
        )
    for consumers in (1, 4) if issue18 else ():
        value, detail = core_ratio("sqlite", f"receive_{consumers}c")
        add(
            f"SQLite single-message receive, {consumers} consumer{'s' if consumers > 1 else ''}, vs raw "
            "sqlite3",
            value,
            0.8,
            detail,
        )
    for engine in ("postgresql", "sqlite"):
        peek = peek_rows(scale, engine)
        small, large = peek.get(1_000), peek.get(1_000_000)
        if small and large:
            value = large["peek_estimate"]["median_us"] / small["peek_estimate"]["median_us"]
            detail = (
                f"peek_estimate {small['peek_estimate']['median_us']:,.0f} -> "
                f"{large['peek_estimate']['median_us']:,.0f} µs; "
                f"count() {small['count']['median_us']:,.0f} -> "
                f"{large['count']['median_us']:,.0f} µs"
            )
        else:
            value, detail = None, "needs run.py --scale with peek sizes 1,000 and 1,000,000"
        add(
            f"{ENGINE_LABELS[engine]} peek_estimate cost at 1,000,000 rows / at 1,000 rows",
            value,
            2.0,
            detail,
            True,
        )
    for rows in (1_000_000, 10_000_000) if issue18 else ():
        drain = package_drain(scale, rows)
        value, detail = None, f"needs run.py --scale with {rows:,} rows (--deep for 10,000,000)"
        if drain:
            deciles = drain["decile_msgs_per_s"]
            value = min(deciles) / deciles[0]
            detail = (
                f"first tenth {deciles[0]:,.0f}, slowest {min(deciles):,.0f} msgs/s; "
                f"{drain['seconds']:,.0f} s in all, autovacuum on"
            )
        add(
            f"PostgreSQL drain of {rows:,} queued rows, slowest tenth / first tenth",
            value,
            0.8,
            detail,
        )
    for engine in ("postgresql", "sqlite"):
        pump = pump_row(doc, engine)
        if pump and "ratio_to_raw_receive_4c" in pump:
            ratio = pump["ratio_to_raw_receive_4c"]
            value = ratio["median"]
            detail = (
                f"pump {pump['msgs_per_s']['median']:,.0f} / raw 4-consumer receive "
                f"{pump['raw_receive_4c_msgs_per_s']['median']:,.0f} msgs/s (rounds {ratio['min']:.2f}-"
                f"{ratio['max']:.2f})"
            )
        else:
            value, detail = None, ""
        add(
            f"{ENGINE_LABELS[engine]} MessagePump, concurrency 4, vs raw 4-consumer receive",
            value,
            0.7,
            detail,
        )
    return targets


def value_text(target: dict[str, Any]) -> str:
    """A target's measured value: a ratio (``0.80x``, rounded down) or milliseconds (rounded up, so a
    latency shown as 20.0 ms never misses 20)."""
    if target.get("unit") == "ms":
        return "-" if target["value"] is None else f"{math.ceil(target['value'] * 10) / 10:.1f} ms"
    return ratio_text(target["value"])


def wanted_text(target: dict[str, Any]) -> str:
    unit = " ms" if target.get("unit") == "ms" else "x"
    return f"{target['op']} {target['threshold']}{unit}"


def ratio_text(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{math.floor(value * 100) / 100:.2f}x"  # rounded down: a ratio shown as 0.80x never misses 0.8


# ---- text for the terminal --------------------------------------------------------------------------
def summary_text(doc: dict[str, Any]) -> str:
    lines = []
    if doc["meta"]["kind"] == "throughput":
        lines.append("throughput (msgs/s, median [min-max]):")
        for label, spread in figures(doc):
            lines.append(
                f"  {label:<70} {spread['median']:>9,.0f} [{spread['min']:,.0f}-{spread['max']:,.0f}]"
            )
        for skipped in doc.get("skipped", []):
            lines.append(f"  skipped {skipped['peer']} on {skipped['engine']}: {skipped['reason']}")
        lines += wakeup_text(doc)
        targets = compute_targets(doc, None, issue18=True)
    else:
        for result in doc["scale"]:
            for drain in result["drains"]:
                lines.append(
                    f"  {ENGINE_LABELS[result['engine']]} {drain['rows']:,} rows: "
                    f"{drain['msgs_per_s']:,.0f} msgs/s,"
                    f" RSS {drain['rss_start'] / 2**20:.0f}/{drain['rss_peak'] / 2**20:.0f}/"
                    f"{drain['rss_end'] / 2**20:.0f} MiB"
                )
        targets = compute_targets(None, doc, issue18=True)
    lines.append("targets:")
    for target in targets:
        if target["status"] != "not measured":
            lines.append(
                f"  {target['status']:<5} {target['target']}: {value_text(target)} "
                f"({wanted_text(target)}) {target['detail']}"
            )
    return "\n".join(lines)


def figures(doc: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(label, median/min/max msgs/s) of every throughput figure, in table order."""
    rows = []
    for engine in ("postgresql", "sqlite"):
        name = ENGINE_LABELS[engine]
        for row in doc.get("core", []):
            if row["engine"] == engine:
                for side in ("project", "raw"):
                    rows.append((f"{name} {row['label']} — {side}", side_spread(row, side)))
        pump = pump_row(doc, engine)
        if pump:
            rows.append((f"{name} {pump['label']} — project", pump["msgs_per_s"]))
        for peer in doc.get("peers", []):
            if peer["engine"] == engine:
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} send", peer["send_msgs_per_s"]))
                rows.append((f"{name} {PEER_NAMES[peer['peer']]} receive", peer["receive_msgs_per_s"]))
        for row in handler_rows(doc, engine).values():
            if row.get("available"):
                rows.append((f"{name} handlers: {row['label']} ({row['level']})", row["msgs_per_s"]))
    return rows


def wakeup_text(doc: dict[str, Any]) -> list[str]:
    """The wake-up section for the terminal."""
    lines = []
    for engine in ("postgresql", "sqlite"):
        for row in wakeup_rows(doc, engine).values():
            if row.get("available"):
                lines.append(
                    f"  {ENGINE_LABELS[engine]} {row['label']:<50} p50 {row['p50_ms']:7.1f}  p95 "
                    f"{row['p95_ms']:7.1f}  max {row['max_ms']:7.1f} ms"
                )
            else:
                lines.append(f"  {ENGINE_LABELS[engine]} {row['label']:<50} {row.get('reason', 'not run')}")
    return ["wake-up latency, commit to handler:", *lines] if lines else []
