"""Why a deep PostgreSQL queue's drain slowed down, and what the receive's low-water mark changes.

Fills a queue on a throwaway PostgreSQL server (autovacuum on, the server's defaults) with ``--rows``
messages of 1 KB, drains it through the project with ``receive(max_messages=100)``, and at the start, the
middle and the last tenth of the drain runs ``EXPLAIN (ANALYZE, BUFFERS)`` of the receive's pick two ways,
each in a transaction that is rolled back:

- from the start of the RowVersion index (the receive before the low-water mark, and still every reset);
- after the mark (what a receive runs while the drain goes on).

It records the pages each read (shared hit + read), their time, the table's dead tuples and autovacuum
runs, and the drain's rate per tenth.

    benchmarks/.venv/bin/python benchmarks/explain_drain.py --rows 1000000 \\
        --json docs/benchmarks/deep-explain.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import provenance  # noqa: E402
from postgres_bed import throwaway_postgres  # noqa: E402

BODY = b"x" * 1024
BATCH = 100


def explain(connection: Any, statement: str, params: tuple[Any, ...]) -> dict[str, Any]:
    with connection.transaction(force_rollback=True):
        plan = connection.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params).fetchone()[
            0
        ]
    top = plan[0]["Plan"]
    return {
        "pages": int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)),
        "ms": plan[0]["Execution Time"],
    }


def table_stats(connection: Any, name: str) -> dict[str, int]:
    connection.execute("SELECT pg_stat_clear_snapshot()")
    dead, autovacuums, size = connection.execute(
        "SELECT n_dead_tup, autovacuum_count, pg_total_relation_size(relid) FROM pg_stat_user_tables "
        "WHERE relname = %s",
        (name,),
    ).fetchone()
    return {"dead_tuples": int(dead), "autovacuum_count": int(autovacuums), "total_bytes": int(size)}


def measure(rows: int) -> dict[str, Any]:
    import psycopg

    from airflow_provider_sqlqueue.transport import open_transport

    with throwaway_postgres(durable=True) as cluster, open_transport(cluster.url()) as transport:
        queue = transport.queue("deep")
        queue.create()
        table = transport.dialect.qualified_name(queue.address)
        admin = psycopg.connect(cluster.url().replace("postgresql+psycopg", "postgresql"), autocommit=True)
        admin.execute(
            f"INSERT INTO {table} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
            "SELECT gen_random_uuid(), NULL, NULL, true, NULL, '{}', %s FROM generate_series(1, %s)",
            (BODY, rows),
        )
        admin.execute(f"ANALYZE {table}")
        from_start = (
            f"SELECT RowVersion FROM {table} ORDER BY RowVersion LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
        )
        after_mark = (
            f"SELECT RowVersion FROM {table} WHERE RowVersion > %s "
            f"ORDER BY RowVersion LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
        )
        points: list[dict[str, Any]] = []

        def note(received: int) -> None:
            mark = queue._low_water.position()
            time.sleep(1.1)  # table counters reach pg_stat_user_tables at most once a second
            points.append(
                {
                    "received": received,
                    "mark": mark,
                    "from_start": explain(admin, from_start, ()),
                    "after_mark": explain(admin, after_mark, (mark,)) if mark is not None else None,
                    **table_stats(admin, "deep"),
                }
            )
            print(f"  at {received:,}: {points[-1]}", flush=True)

        note(0)
        received, deciles = 0, []
        marks = [rows * step // 10 for step in range(1, 11)]
        started = last_time = time.monotonic()
        last_count = 0
        while True:
            with queue.receive(BATCH) as batch:
                got = len(batch)
            if not got:
                break
            received += got
            if marks and received >= marks[0]:
                now = time.monotonic()
                deciles.append((received - last_count) / (now - last_time))
                marks.pop(0)
                if len(deciles) in (5, 9):
                    note(received)
                last_time, last_count = time.monotonic(), received
        seconds = time.monotonic() - started
        return {"rows": rows, "drain_seconds": seconds, "decile_msgs_per_s": deciles, "points": points}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "deep-explain.json")
    args = parser.parse_args(argv)
    started = datetime.now(timezone.utc)
    meta = {
        "kind": "explain_drain",
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "command": " ".join(["benchmarks/explain_drain.py", *(argv if argv is not None else sys.argv[1:])]),
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
        "postgresql_settings": "throwaway_postgres(durable=True): the server's defaults, autovacuum on",
    }
    with tempfile.TemporaryDirectory():
        result = measure(args.rows)
    meta["load_average_after"] = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "drain": result}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
