"""What a benchmark records with its figures: the commit it measured, and the data file of its runs, so every
published figure can name where it came from."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def commit(folder: Path = REPO) -> str:
    """The commit of the checkout at ``folder`` (this one by default; ``+changes`` when tracked files differ
    from it), or why it is unknown."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+changes" if changed else "")


def spread(values: list[float]) -> dict[str, float]:
    """The median and the range of one case's rounds, as the data files hold them."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def write_runs(path: Path, run: str, meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """Write the data file of one run: its ``meta`` (commit, machine, load, settings) under ``run``, and its
    ``results``, each naming the run; say where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"run": run, **result} if "run" not in result else result for result in results]
    document = {"runs": {run: meta}, "results": rows}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
