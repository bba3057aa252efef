"""The two PostgreSQL queue-table layouts side by side, from docs/data/pg-layouts.json
(benchmarks/pg_layouts_bench.py), on docs/dba-ddl.md."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_brief, run_link

DATA_FILE = "pg-layouts.json"
LAYOUTS = {
    "sqlserver-transport": "this package's (`RowVersion`)",
    "postgresql-transport": "NServiceBus.Transport.PostgreSql's (`Seq`)",
}
CASES = {
    "send_batch": "batch send",
    "receive_one": "one-message receives",
    "receive_100": "receives of 100",
}


def _ratio(mine: list[float], theirs: list[float]) -> float:
    """The median of the per-round ratios (both layouts measured in the same round)."""
    ratios = sorted(a / b for a, b in zip(mine, theirs, strict=True))
    middle = len(ratios) // 2
    return ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2


def layout_lines(data: dict[str, Any]) -> list[str]:
    [(name, run)] = data["runs"].items()
    by_key = {(r["layout"], r["case"]): r for r in data["results"] if r["run"] == name}
    package, reference = LAYOUTS
    lines = [
        f"| operation | {LAYOUTS[package]}, msgs/s | {LAYOUTS[reference]}, msgs/s | reference / package |",
        "|---|--:|--:|--:|",
    ]
    for case, label in CASES.items():
        ours, theirs = by_key[(package, case)], by_key[(reference, case)]
        cells = []
        for result in (ours, theirs):
            spread = result["msgs_per_s"]
            cells.append(f"{spread['median']:,.0f} ({spread['min']:,.0f}-{spread['max']:,.0f})")
        lines.append(
            f"| {label} | {cells[0]} | {cells[1]} | **{_ratio(theirs['rounds'], ours['rounds']):.2f}x** |"
        )
    return [
        *lines,
        "",
        f"Messages per second, median (min-max) of {run['rounds']} rounds; the ratio is the median of the "
        f"rounds' ratios. Each round, for each layout in turn (the order alternating), on a fresh queue: a "
        f"batch send of {run['messages']:,} 100-byte messages (binary `COPY` on both), {run['single']:,} of "
        "them received one at a time, the rest 100 at a time, through the same transport. "
        f"`benchmarks/pg_layouts_bench.py` on {machine_brief(run)}; PostgreSQL {run['postgresql']}, "
        f"{run['postgresql_settings']}. {run_link(DATA_FILE)}",
    ]


def dba_ddl_blocks() -> dict[str, tuple[str, list[str]]]:
    return {"pg-layouts": (f"docs/data/{DATA_FILE}", layout_lines(load_data(DATA_FILE)))}
