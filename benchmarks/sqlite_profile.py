"""Where the project's SQLite hot paths spend their time, part by part, in one process: the evidence behind
docs/history/performance-tuning.md's SQLite passes (run it against two checkouts for a before and after).

    PYTHONPATH=. python benchmarks/sqlite_profile.py --json docs/data/raw/sqlite-profile-<commit>.json

Each part is timed with ``timeit`` in many short repeats, interleaved with the others, and the fastest
repeat is kept: the least disturbed by other work on the machine, so parts compare with each other and
between checkouts measured alike, while the absolute figures are those of a quiet moment. Uses only
functions that both the tuned and the earlier code have (``TableQueue._plain_rows``, ``decode_rows``,
``decode_headers``, ``parse_id``, ``TableQueue.receive``, ``Transport.connection``), and the batch read of
Ids where the code has it (``parse_text_ids``; before it, ``decode_rows`` called ``parse_id`` per row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import timeit
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BODY = bytes(range(256)) * 4  # 1 KB, as in core_bench
BATCH = 100


def parts(folder: str) -> list[tuple[str, str, str, int, Callable[[], Any]]]:
    """(key, label, unit, messages per call, call) for every part."""
    import airflow_provider_sqlqueue.transport.queue.received_rows as rows_module
    from airflow_provider_sqlqueue.transport import open_transport
    from airflow_provider_sqlqueue.transport.headers import decode_headers

    transport = open_transport(f"sqlite:///{folder}/profile.db")
    queue = transport.queue("orders")
    queue.create()
    bodies = [BODY] * BATCH
    queue.send_batch(bodies)
    statement = queue._sql.locking(True).receive_batch
    connection = sqlite3.connect(f"{folder}/profile.db", isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA synchronous=FULL")
    cursor = connection.cursor()
    cursor.execute("BEGIN IMMEDIATE")
    rows = cursor.execute(statement, (BATCH,)).fetchall()
    cursor.execute("ROLLBACK")
    # decode_rows reads a batch's Ids in one pass where the code has parse_text_ids, one by one before
    read_ids = getattr(rows_module, "parse_text_ids", None) or (
        lambda ids: [rows_module.parse_id(value) for value in ids]
    )
    empty = transport.queue("empty")
    empty.create()

    def raw_empty_receive() -> None:
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute(empty._sql.locking(True).receive_batch, (1,))
        cursor.fetchall()
        connection.commit()

    def project_empty_receive() -> None:
        with empty.receive():
            pass

    def lease() -> None:
        with transport.connection():
            pass

    return [
        ("send_params", "send_batch: parameters of 100 bare bodies (`_plain_rows`)", "µs/msg", BATCH,
         lambda: queue._plain_rows(bodies)),
        ("decode_rows", "receive_batch: 100 rows to messages (`decode_rows`)", "µs/msg", BATCH,
         lambda: rows_module.decode_rows(rows)),
        ("decode_headers", "of which the header JSON (`decode_headers`)", "µs/msg", BATCH,
         lambda: [decode_headers(row[4]) for row in rows]),
        ("parse_id", "of which the Id text to a `uuid.UUID` (`parse_id`)", "µs/msg", BATCH,
         lambda: [rows_module.parse_id(row[0]) for row in rows]),
        ("batch_ids", "of which the batch's Id texts to `uuid.UUID`s, as `decode_rows` reads them", "µs/msg",
         BATCH, lambda: read_ids([row[0] for row in rows])),
        ("raw_empty_receive", "one receive finding nothing, raw `sqlite3`", "µs/txn", 1, raw_empty_receive),
        ("project_empty_receive", "one receive finding nothing, `queue.receive()`", "µs/txn", 1,
         project_empty_receive),
        ("lease", "of which the pool's checkout and return (`transport.connection()`)", "µs/txn", 1, lease),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=40, help="interleaved repeats of every part [40]")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    import provenance  # beside this script

    import airflow_provider_sqlqueue

    package_root = Path(airflow_provider_sqlqueue.__file__).resolve().parent.parent
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": provenance.commit(package_root),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "load_average_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="sqlqueue-profile-") as folder:
        chosen = parts(folder)
        best = {key: float("inf") for key, *_ in chosen}
        for _ in range(args.repeat):
            for key, _label, _unit, messages, call in chosen:
                number = 2000 // messages or 1
                seconds = timeit.timeit(call, number=number)
                best[key] = min(best[key], seconds / number / messages * 1e6)
    meta["load_average_after"] = os.getloadavg()
    results = [
        {"key": key, "label": label, "unit": unit, "us": round(best[key], 3)}
        for key, label, unit, _, _ in chosen
    ]
    for result in results:
        print(f"{result['us']:9.3f} {result['unit']:7s} {result['label']}")
    print(f"commit {meta['commit']}, load average {meta['load_average_before'][0]:.2f} at the start")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "parts": results}, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
