"""The delayed mover's rate before and after it moved due rows on the server, side by side in one run.

    /work/main/.venv/bin/python benchmarks/mover_bench.py [--messages 2000] [--rounds 3]
        [--json docs/data/delayed-mover.json]
    /work/main/.venv/bin/python benchmarks/render.py      # docs/delayed-delivery.md's generated block

**Before** is the mover of commit ``BEFORE_COMMIT``, the last one that read every due row (headers and
body) into Python and sent it on through the outgoing-message constructor: its package is exported with
``git archive`` into a temporary folder and imported from there by a worker process, so that mover stays
out of the package. **After** is this checkout's package. Each round runs both, back to back and in
alternating order, on the same engines: one SQLite file (WAL, synchronous=FULL) and one throwaway
PostgreSQL cluster (fsync and synchronous_commit on). A round stores ``--messages`` due messages (1 KB
bodies, NServiceBus-like headers) for one destination in one transaction, then times ``move_once()``
(batches of 100) until the delayed table is empty; the rate is messages per second of moving. The JSON
records the commits, the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BEFORE_COMMIT = "fbd1a76"  # the parent of the commit that moved due rows on the server
BODY_BYTES = 1024
BATCH = 100
DEFAULT_MESSAGES = 2000
DEFAULT_ROUNDS = 3


def _headers(n: int) -> dict[str, str]:
    return {
        "NServiceBus.MessageId": str(uuid.uuid4()),
        "NServiceBus.EnclosedMessageTypes": "Sales.OrderAccepted, Sales.Messages",
        "NServiceBus.ContentType": "application/json",
        "NServiceBus.OriginatingEndpoint": "Sales",
        "Sequence": str(n),
    }


def worker(url: str, schema: str | None, messages: int) -> dict[str, Any]:
    """One measurement with whichever package ``sys.path`` finds first: store, then time the moves."""
    from airflow_provider_sqlqueue.transport import DelayedMover, DelayedStore, open_transport

    options = {"default_schema": schema} if schema else {}
    with open_transport(url, **options) as transport:
        transport.queue("error").create()
        transport.queue("Billing").create()
        store = DelayedStore(transport, "Sales.Delayed")
        store.create()
        past = datetime.now(timezone.utc) - timedelta(minutes=1)
        body = b"x" * BODY_BYTES
        with transport.connection(store.address) as connection:
            for n in range(messages):
                store.store_on(connection, store.prepare("Billing", body, _headers(n), deliver_at=past))
            connection.commit()
        mover = DelayedMover(store, batch_size=BATCH)
        started = time.perf_counter()
        moved = 0
        while True:
            count = mover.move_once()
            if not count:
                break
            moved += count
        seconds = time.perf_counter() - started
        arrived = transport.queue("Billing").count()
    if moved != messages or arrived != messages:
        raise RuntimeError(f"moved {moved}, arrived {arrived} of {messages}")
    return {"seconds": seconds, "rate": messages / seconds}


def _export_before(folder: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", BEFORE_COMMIT, "airflow_provider_sqlqueue"],
        cwd=HERE.parent,
        capture_output=True,
        check=True,
    ).stdout
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _run_worker(code_root: Path, url: str, schema: str | None, messages: int) -> dict[str, Any]:
    environment = {**os.environ, "PYTHONPATH": str(code_root)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", url, "--messages", str(messages)]
    if schema:
        command += ["--schema", schema]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker from {code_root} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.schema, args.messages)))
        return 0

    import provenance
    from postgres_bed import throwaway_postgres
    from run import machine

    started = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "before_commit": BEFORE_COMMIT,
        "before_how": "the parent commit's package, exported with git archive and run in the same run",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "messages": args.messages,
        "rounds": args.rounds,
        "body_bytes": BODY_BYTES,
        "batch": BATCH,
        "postgresql_settings": "throwaway_postgres(durable=True): fsync=on, synchronous_commit=on",
        "sqlite_settings": "journal_mode=WAL, synchronous=FULL",
        "load_average_before": os.getloadavg(),
    }
    rates: dict[str, dict[str, list[float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="mover-bench-") as scratch,
        throwaway_postgres(durable=True) as cluster,
    ):
        folder = Path(scratch)
        meta["machine"] = machine(folder)
        codes = {"before": _export_before(folder / "before"), "after": HERE.parent}
        for round_number in range(args.rounds):
            order = ["before", "after"] if round_number % 2 == 0 else ["after", "before"]
            for engine in ("sqlite", "postgresql"):
                for code in order:
                    if engine == "sqlite":
                        url, schema = f"sqlite:///{folder / f'{code}-{round_number}.db'}", None
                    else:
                        url, schema = cluster.url(), f"{code}_{round_number}"
                        cluster.psql(f'CREATE SCHEMA "{schema}"')
                    result = _run_worker(codes[code], url, schema, args.messages)
                    rates.setdefault(engine, {}).setdefault(code, []).append(result["rate"])
                    print(f"round {round_number + 1} {engine} {code}: {result['rate']:,.0f} messages/s")
    meta["load_average_after"] = os.getloadavg()
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    run = f"mover-{started:%Y-%m-%d}"
    meta["source"] = (
        f"benchmarks/mover_bench.py --messages {args.messages} --rounds {args.rounds}, run at commit "
        f"{meta['commit']}"
    )
    results = [
        {"run": run, "engine": engine, "code": code, "rate": provenance.spread(values), "rounds": values}
        for engine, by_code in rates.items()
        for code, values in by_code.items()
    ]
    if args.json:
        provenance.write_runs(args.json, run, meta, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
