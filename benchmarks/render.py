"""Render every published figure from the committed data: docs/benchmarks.md (and its chart) from the JSON
of benchmarks/run.py, and the generated blocks of docs/reliability.md, docs/performance.md, docs/spark.md,
docs/spark-exactly-once.md, docs/dba-maintenance.md, docs/airflow-ui.md, docs/delayed-delivery.md,
docs/operating.md, docs/exactly-once.md, docs/request-reply.md, docs/runs.md, the history pages of
docs/history/, README.md and benchmarks/README.md from docs/data/*.json (and the benchmark JSON they name).

    benchmarks/.venv/bin/python benchmarks/render.py            # rewrite every page (and the chart)
    benchmarks/.venv/bin/python benchmarks/render.py --check    # exit 1 if a page differs from its data
    benchmarks/.venv/bin/python benchmarks/render.py [--results docs/benchmarks/results.json]
        [--scale docs/benchmarks/scale.json] [--out docs/benchmarks.md] [--image docs/images/benchmarks.png]

With ``--out`` only the benchmarks page is written (where ``--out`` says). The renderers live in
benchmarks/pages/, one module per page or figure family. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pages import (
    benchmarks_page,
    dba_current,
    dba_tables,
    mover_page,
    performance_history,
    performance_page,
    pg_layouts,
    pump_savepoints,
    queues_cost,
    readme_page,
    reliability_page,
    request_reply,
    runs_page,
    spark_drain,
    spark_source,
    transcribed_text,
    trigger_polling,
)
from pages.blocks import ROOT, replace_blocks
from pages.chart import chart_available
from pages.throughput import compute_targets, figures, ratio_text, summary_text

__all__ = ["compute_targets", "figures", "main", "ratio_text", "rendered_pages", "summary_text"]

DEFAULT_RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
DEFAULT_SCALE = ROOT / "docs" / "benchmarks" / "scale.json"
DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"
DEFAULT_IMAGE = ROOT / "docs" / "images" / "benchmarks.png"
BlockRenderer = Callable[[], dict[str, tuple[str, list[str]]]]
BLOCK_PAGES: dict[Path, BlockRenderer] = {
    ROOT / "docs" / "reliability.md": reliability_page.blocks,
    ROOT / "docs" / "performance.md": performance_page.blocks,
    ROOT / "docs" / "history" / "performance-tuning.md": lambda: (
        performance_history.blocks() | pump_savepoints.history_blocks()
    ),
    ROOT / "docs" / "exactly-once.md": pump_savepoints.exactly_once_blocks,
    ROOT / "benchmarks" / "README.md": readme_page.blocks,
    ROOT / "docs" / "spark.md": spark_drain.spark_page_blocks,
    ROOT / "docs" / "spark-exactly-once.md": spark_source.spark_source_blocks,
    ROOT / "docs" / "dba-maintenance.md": dba_current.maintenance_blocks,
    ROOT / "docs" / "dba-ddl.md": pg_layouts.dba_ddl_blocks,
    ROOT / "docs" / "history" / "deep-queues.md": dba_tables.history_blocks,
    ROOT / "docs" / "airflow-ui.md": transcribed_text.airflow_ui_blocks,
    ROOT / "docs" / "delayed-delivery.md": mover_page.delayed_delivery_blocks,
    ROOT / "docs" / "history" / "delayed-delivery.md": mover_page.history_blocks,
    ROOT / "docs" / "operating.md": queues_cost.operating_blocks,
    ROOT / "docs" / "history" / "operating.md": queues_cost.history_blocks,
    ROOT / "README.md": reliability_page.readme_blocks,
    ROOT / "docs" / "sensor.md": trigger_polling.sensor_blocks,
    ROOT / "docs" / "request-reply.md": request_reply.request_reply_blocks,
    ROOT / "docs" / "runs.md": runs_page.runs_blocks,
}


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def rendered_pages() -> dict[Path, str]:
    """What every page with committed figures must hold, rendered from the committed data (the benchmarks
    page as it is published: with its chart)."""
    doc = _load(DEFAULT_RESULTS)
    assert doc is not None, f"{DEFAULT_RESULTS} is missing"
    pages = {DEFAULT_OUT: benchmarks_page.page_text(doc, _load(DEFAULT_SCALE), "images/benchmarks.png", True)}
    for page, blocks in BLOCK_PAGES.items():
        name = page.relative_to(ROOT).as_posix()
        pages[page] = replace_blocks(page.read_text(encoding="utf-8"), blocks(), name)
    return pages


def check() -> list[str]:
    """The pages whose text differs from what their data renders to."""
    return [
        page.relative_to(ROOT).as_posix()
        for page, text in rendered_pages().items()
        if page.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="compare the pages with their data, write nothing"
    )
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="run.py's throughput JSON")
    parser.add_argument("--scale", type=Path, default=DEFAULT_SCALE, help="run.py --scale's JSON (optional)")
    parser.add_argument("--out", type=Path, default=None, help="write only the benchmarks page, here")
    parser.add_argument("--image", type=Path, default=DEFAULT_IMAGE, help="the chart to write (PNG)")
    args = parser.parse_args(argv)
    if args.check:
        stale = check()
        for page in stale:
            print(f"{page} differs from its data: run benchmarks/render.py")
        return 1 if stale else 0
    doc = json.loads(args.results.read_text(encoding="utf-8"))
    out = args.out or DEFAULT_OUT
    benchmarks_page.render(doc, _load(args.scale), out, args.image)
    print(f"wrote {out}" + (f" and {args.image}" if chart_available() else " (no chart: no matplotlib)"))
    if args.out is None:
        for page, text in rendered_pages().items():
            if page != DEFAULT_OUT:
                page.write_text(text, encoding="utf-8")
                print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
