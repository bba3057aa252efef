"""The two PostgreSQL queue-table layouts side by side (issue 64): this package's (the NServiceBus SQL Server
transport's columns, ``RowVersion bigint`` identity) and NServiceBus.Transport.PostgreSql's (``Id uuid
PRIMARY KEY, Expires timestamp, Headers, Body, Seq serial UNIQUE``), through the same transport code.

Each round measures, for each layout in turn (the order alternates from round to round, so drift falls on
both alike): a batch send of ``--messages`` 100-byte messages (``send_batch``: a binary COPY on each
layout, of the columns it has), then one-message receives of ``--single`` of them, then receives of 100 at
a time of the rest. Each layout's
queue is created fresh per round. The JSON records per-round rates, the machine, its load and the commit;
benchmarks/pages/pg_layouts.py renders the medians and ratios into docs/dba-ddl.md.

    python benchmarks/pg_layouts_bench.py --messages 10000 --single 1000 --rounds 5 \\
        --json docs/data/pg-layouts.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

LAYOUTS = ("sqlserver-transport", "postgresql-transport")
CASES = ("send_batch", "receive_one", "receive_100")
BODY = b"x" * 100


def one_round(transport: Any, layout: str, messages: int, single: int) -> dict[str, float]:
    """Messages per second of each case on a fresh queue of ``layout``."""
    queue = transport.queue(f"layout_bench_{uuid.uuid4().hex[:8]}", error_queue=None)
    queue.create(column_layout=layout)
    try:
        rates: dict[str, float] = {}
        start = time.perf_counter()
        for offset in range(0, messages, 1000):
            queue.send_batch([BODY] * min(1000, messages - offset))
        rates["send_batch"] = messages / (time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(single):
            with queue.receive(max_messages=1) as batch:
                assert len(batch) == 1
        rates["receive_one"] = single / (time.perf_counter() - start)
        rest, taken = messages - single, 0
        start = time.perf_counter()
        while taken < rest:
            with queue.receive(max_messages=100) as batch:
                taken += len(batch)
        rates["receive_100"] = rest / (time.perf_counter() - start)
        assert queue.count() == 0
    finally:
        queue.drop()
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=2_000, help="of them received one at a time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    args = parser.parse_args(argv)
    if not 0 < args.single < args.messages:
        parser.error("--single must be between 0 and --messages")

    import provenance
    from postgres_bed import throwaway_postgres
    from run import machine

    from airflow_provider_sqlqueue.transport import open_transport

    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "python": platform.python_version(),
        "messages": args.messages,
        "single": args.single,
        "rounds": args.rounds,
        "postgresql_settings": "throwaway_postgres(durable=True): fsync=on, synchronous_commit=on",
        "load_average_before": os.getloadavg(),
    }
    rounds: dict[str, dict[str, list[float]]] = {layout: {case: [] for case in CASES} for layout in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="pg-layouts-bench-") as scratch:
        meta["machine"] = machine(Path(scratch))
        with throwaway_postgres(durable=True) as cluster, open_transport(cluster.url()) as transport:
            with transport.connection() as connection:
                cursor = connection.cursor()
                cursor.execute("SHOW server_version")
                meta["postgresql"] = cursor.fetchall()[0][0]
                connection.commit()
            for number in range(args.rounds):
                order = LAYOUTS if number % 2 == 0 else LAYOUTS[::-1]
                for layout in order:
                    measured = one_round(transport, layout, args.messages, args.single)
                    for case, rate in measured.items():
                        rounds[layout][case].append(rate)
                    print(
                        f"round {number + 1} {layout}: "
                        + ", ".join(f"{c} {r:,.0f}/s" for c, r in measured.items())
                    )
    meta["load_average_after"] = os.getloadavg()
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["source"] = (
        f"benchmarks/pg_layouts_bench.py --messages {args.messages} --single {args.single} "
        f"--rounds {args.rounds}"
    )
    run = f"pg-layouts-{started:%Y-%m-%d}"
    results = [
        {
            "run": run,
            "layout": layout,
            "case": case,
            "msgs_per_s": provenance.spread(values),
            "rounds": values,
        }
        for layout, cases in rounds.items()
        for case, values in cases.items()
    ]
    if args.json:
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
