"""docs/dba-maintenance.md's current figures for deep queues on PostgreSQL: the latest scale run's drains of
tables as the package creates them, beside the same run's drains that differ in one setting; rendered from
docs/benchmarks/scale.json, whose commit and machine docs/benchmarks.md names."""

from __future__ import annotations

import json
from typing import Any

from pages.blocks import ROOT
from pages.scale_tables import _mib, _runs_during, _short_return
from pages.throughput import is_package_drain

SCALE = "docs/benchmarks/scale.json"


def _setup(drain: dict[str, Any]) -> str:
    """What the drain's table and session had, named against the package's own setup."""
    if drain.get("package_storage_parameters") is False:
        return "storage parameters reset to the server's defaults"
    if drain.get("package_write_back") is False:
        return f"session left at `backend_flush_after` {drain.get('backend_flush_after')}"
    if drain.get("throttled_vacuum"):
        delay = drain.get("throttle_cost_delay_ms")
        return "the server's cost delay" if delay is None else f"a cost delay of {delay:g} ms"
    return "as the package creates it"


def deep_drains_paragraph(scale: dict[str, Any]) -> list[str]:
    """One row per PostgreSQL drain with autovacuum on: the package's tables first, by depth, then the
    same run's drains that differ from them in one setting."""
    (result,) = [result for result in scale["scale"] if result["engine"] == "postgresql"]
    drains = [drain for drain in result["drains"] if drain["autovacuum"]]
    drains.sort(key=lambda drain: (not is_package_drain(drain), drain["rows"]))
    package = [drain for drain in drains if is_package_drain(drain)]
    parameters = ", ".join(f"`{entry}`" for entry in package[0]["before"]["storage_parameters"])
    waits = {drain["storage_return"]["wait_seconds"] for drain in drains if drain.get("storage_return")}
    lines = [
        "From [the latest scale run](benchmarks.md#scale) (that page names its commit and machine): one "
        "consumer draining each queue with `receive(max_messages=100)`, autovacuum on with the server's "
        f"`autovacuum_naptime`, the package's storage parameters ({parameters}) unless the row says "
        'otherwise; "storage back" is how long after the drain the table was back to 2 % of its size (or '
        "1 MiB) without a manual `VACUUM`" + (f", watched for {max(waits):.0f} s" if waits else "") + ":",
        "",
        "| queued rows | table and session | size after the drain | drain | slowest tenth / first | "
        "autovacuum runs during the drain | unwritten page cache at most | storage back |",
        "|--:|---|--:|--:|--:|--:|--:|---|",
    ]
    for drain in drains:
        deciles = drain["decile_msgs_per_s"]
        unwritten = max(tenth["dirty_mb"] for tenth in drain["decile_activity"])
        back = _short_return(drain) if drain.get("storage_return") else "not watched"
        lines.append(
            f"| {drain['rows']:,} | {_setup(drain)} | {_mib(drain['after']['total_bytes'])} | "
            f"{drain['seconds']:,.1f} s | {min(deciles) / deciles[0]:.2f}x | {_runs_during(drain)} | "
            f"{unwritten:,} MiB | {back} |"
        )
    return lines


def maintenance_blocks() -> dict[str, tuple[str, list[str]]]:
    scale = json.loads((ROOT / SCALE).read_text(encoding="utf-8"))
    return {"dba-deep-drains": (SCALE, deep_drains_paragraph(scale))}
