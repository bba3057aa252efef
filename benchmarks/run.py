"""One-command benchmark: this project beside the raw database and peer Python queue libraries.

    benchmarks/.venv/bin/python benchmarks/run.py [--quick] [--n 20000] [--repeat 3] [--json FILE]
    benchmarks/.venv/bin/python benchmarks/run.py --scale [--scale-sizes 10000,100000,1000000] [--json FILE]
    benchmarks/.venv/bin/python benchmarks/render.py

One run starts one throwaway PostgreSQL 15 cluster with durable settings and one SQLite file (WAL,
synchronous=FULL), and on each, round after round:

- this project against the raw driver running the same statements (core_bench.py's six cases: send,
  send_batch, receive and receive_batch with 1 and 4 consumers);
- this project's MessagePump (monitor strategy, concurrency 4, no-op handler) draining a queue;
- the peers installed in this environment (benchmarks/setup.sh installs them): pgqueuer, procrastinate,
  kombu's SQLAlchemy transport, persist-queue; each sends N messages of 1 KB and drains them, checked.

Every figure is the median of the rounds, with min-max. ``--scale`` instead measures deep queues (10k,
100k, 1M rows), storage left behind, peek_estimate against count(), and the consumer's memory. Results
go to JSON (default benchmarks/results/<name>.json) for benchmarks/render.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import core_bench  # noqa: E402
import peers  # noqa: E402
import provenance  # noqa: E402
import scale  # noqa: E402
from core_bench import BATCH, BODY_BYTES, CASES, ENGINE_LABELS, Case, EngineBench  # noqa: E402

DEFAULT_N = 20_000
DEFAULT_N_SINGLE = 5_000
DEFAULT_N_SLOW = 1_000
DEFAULT_REPEAT = 3
QUICK = {"n": 1_000, "n_single": 200, "n_slow": 100, "repeat": 1}
PUMP_CASE = Case("pump_4c", "MessagePump, monitor, concurrency 4", "receive", 1, 1)
LIBRARIES = (
    "airflow-provider-sqlqueue",
    "psycopg",
    "sqlalchemy",
    "pgqueuer",
    "asyncpg",
    "procrastinate",
    "kombu",
    "persist-queue",
    "matplotlib",
)


# ---- the machine -------------------------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def machine(folder: Path) -> dict[str, Any]:
    """CPU model, cores, RAM, the file system under the benchmark's files, kernel."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if "model name" in line
        ),
        platform.processor() or "unknown",
    )
    memory = next(
        (line.split()[1] for line in _read("/proc/meminfo").splitlines() if "MemTotal" in line), "0"
    )
    disk: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        source, fstype = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", str(folder)],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.split()[:2]
        disk = {"source": source, "fstype": fstype}
        device = Path(source).name.rstrip("0123456789") if source.startswith("/dev/") else ""
        rotational = _read(f"/sys/block/{device}/queue/rotational").strip()
        if rotational:
            disk["rotational"] = rotational == "1"
    virtual = "hypervisor" in _read("/proc/cpuinfo")
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "ram_gib": round(int(memory) / 2**20, 1),
        "disk": disk,
        "kernel": platform.release(),
        "os": platform.platform(),
        "virtual_machine": virtual,
    }


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


# ---- summaries -----------------------------------------------------------------------------------------
def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize_pump(engine: str, n: int, rounds: list[dict[str, Any]], raw_4c: list[float]) -> dict[str, Any]:
    rates = [sample["msgs_per_s"] for sample in rounds]
    ratios = [rate / raw for rate, raw in zip(rates, raw_4c, strict=False)]
    row = {
        "engine": engine,
        "engine_label": ENGINE_LABELS[engine],
        "case": PUMP_CASE.key,
        "label": PUMP_CASE.label,
        "n": n,
        "rounds": rounds,
        "msgs_per_s": spread(rates),
        "cpu_us_per_msg": statistics.median(sample["client_cpu_us_per_msg"] for sample in rounds),
    }
    if ratios:
        row["raw_receive_4c_msgs_per_s"] = spread(raw_4c)
        row["ratio_to_raw_receive_4c"] = spread(ratios)
    return row


def summarize_peer(peer: peers.PeerCase, n: int, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "peer": peer.key,
        "engine": peer.engine,
        "engine_label": ENGINE_LABELS[peer.engine],
        "label": peer.label,
        "settings": peer.settings,
        "n": n,
        "send_batch": peer.send_batch,
        "receive_batch": peer.receive_batch,
        "consumers": peer.consumers,
        "concurrency": 4 if peer.key == "procrastinate" else peer.consumers,
        "rounds": rounds,
        "send_msgs_per_s": spread([sample["send_msgs_per_s"] for sample in rounds]),
        "receive_msgs_per_s": spread([sample["receive_msgs_per_s"] for sample in rounds]),
        "send_cpu_us_per_msg": statistics.median(sample["send_cpu_us_per_msg"] for sample in rounds),
        "receive_cpu_us_per_msg": statistics.median(sample["receive_cpu_us_per_msg"] for sample in rounds),
    }


# ---- the throughput run ------------------------------------------------------------------------------
def throughput(args: argparse.Namespace, context: Any, folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    core_rows: list[dict[str, Any]] = []
    pump_rows: list[dict[str, Any]] = []
    peer_rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    chosen_peers = []
    for peer in peers.PEERS:
        if peer.engine not in args.engines or (args.peers != "all" and peer.key not in args.peers):
            continue
        missing = peers.missing_modules(peer)
        if missing:
            reason = f"not importable here: {', '.join(missing)} (run benchmarks/setup.sh)"
            skipped.append({"peer": peer.key, "engine": peer.engine, "reason": reason})
            print(f"note: skipping {peer.key} on {ENGINE_LABELS[peer.engine]}: {reason}", flush=True)
        else:
            chosen_peers.append(peer)
    for engine in args.engines:
        with contextlib.ExitStack() as stack:
            if engine == "postgresql":
                from postgres_bed import throwaway_postgres

                cluster = stack.enter_context(throwaway_postgres(durable=True))
                url = raw_target = cluster.url()
                admin_dsn: str | None = url
            else:
                raw_target = str(folder / "bench.db")
                url = f"sqlite:///{raw_target}"
                admin_dsn = None
            bench = EngineBench(engine, url, raw_target)
            stack.callback(bench.close)
            meta["versions"][engine] = bench.version()
            print(f"{ENGINE_LABELS[engine]} {meta['versions'][engine]}", flush=True)
            from airflow_provider_sqlqueue.transport import open_transport

            with open_transport(url) as transport:
                transport.queue("error").create()
            samples: dict[str, list[dict[str, dict[str, Any]]]] = {case.key: [] for case in args.cases}
            pump_samples: list[dict[str, Any]] = []
            peer_samples: dict[str, list[dict[str, Any]]] = {peer.key_engine: [] for peer in chosen_peers}
            for round_number in range(args.repeat):
                print(f" {ENGINE_LABELS[engine]} round {round_number + 1} of {args.repeat}", flush=True)
                for index, case in enumerate(args.cases):
                    count = args.n_single if case.per_commit else args.n
                    raw_first = (index + round_number) % 2 == 0
                    samples[case.key].append(core_bench.run_pair(context, bench, case, count, raw_first))
                if args.pump:
                    sample = bench.run_case(
                        context, PUMP_CASE, "pump", args.n_single, runner="peers:pump_runner"
                    )
                    pump_samples.append(sample)
                    print(
                        f"  {ENGINE_LABELS[engine]:<10} {PUMP_CASE.label:<36} {'project':<7} "
                        f"{sample['msgs_per_s']:>9,.0f} msgs/s  ({sample['seconds']:.2f} s)",
                        flush=True,
                    )
                for peer in chosen_peers:
                    if peer.engine != engine:
                        continue
                    n = peer_n(args, peer)
                    sample = peers.run_peer(context, peer, n, admin_dsn, folder, round_number)
                    peer_samples[peer.key_engine].append(sample)
                    print(
                        f"  {ENGINE_LABELS[engine]:<10} {peer.key:<14} N={n:<6,} send "
                        f"{sample['send_msgs_per_s']:>9,.0f} msgs/s  receive "
                        f"{sample['receive_msgs_per_s']:>9,.0f}"
                        f" msgs/s  (consumers got {sample['per_consumer']})",
                        flush=True,
                    )
            for case in args.cases:
                count = args.n_single if case.per_commit else args.n
                core_rows.append(core_bench.summarize(engine, case, count, samples[case.key]))
            if pump_samples:
                raw_4c = [sample["raw"]["msgs_per_s"] for sample in samples.get("receive_4c", [])]
                pump_rows.append(summarize_pump(engine, args.n_single, pump_samples, raw_4c))
            for peer in chosen_peers:
                if peer.engine == engine:
                    peer_rows.append(summarize_peer(peer, peer_n(args, peer), peer_samples[peer.key_engine]))
    return {"core": core_rows, "pump": pump_rows, "peers": peer_rows, "skipped": skipped}


def peer_n(args: argparse.Namespace, peer: peers.PeerCase) -> int:
    if peer.slow:
        return min(args.n_slow, args.n_single)
    return args.n_single if peer.per_message else args.n


# ---- the scale run -----------------------------------------------------------------------------------
def scale_run(args: argparse.Namespace, context: Any, folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    engines = []
    for engine in args.engines:
        with contextlib.ExitStack() as stack:
            if engine == "postgresql":
                from postgres_bed import throwaway_postgres

                cluster = stack.enter_context(throwaway_postgres(durable=True))
                url = raw_target = cluster.url()
            else:
                raw_target = str(folder / "scale.db")
                url = f"sqlite:///{raw_target}"
            bench = EngineBench(engine, url, raw_target)
            stack.callback(bench.close)
            meta["versions"][engine] = bench.version()
            print(f"{ENGINE_LABELS[engine]} {meta['versions'][engine]}: scale", flush=True)
            started = time.monotonic()
            result = scale.scale_engine(
                context, bench, args.scale_sizes, args.peek_sizes, args.autovacuum_off
            )
            result["seconds"] = time.monotonic() - started
            engines.append(result)
    return {"scale": engines}


def sizes(text: str) -> list[int]:
    values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if any(value <= 0 for value in values):
        raise argparse.ArgumentTypeError("sizes must be positive")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, help=f"messages per batch case [{DEFAULT_N:,}]")
    parser.add_argument(
        "--n-single", type=int, help=f"messages per one-message-per-commit case [{DEFAULT_N_SINGLE:,}]"
    )
    parser.add_argument(
        "--n-slow", type=int, help=f"messages per run of the slow peers (kombu) [{DEFAULT_N_SLOW:,}]"
    )
    parser.add_argument("--repeat", type=int, help=f"rounds; medians are reported [{DEFAULT_REPEAT}]")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: N=1,000 (200 per-message, 100 slow peers), 1 round"
    )
    parser.add_argument("--engines", default="postgresql,sqlite", help="postgresql and/or sqlite")
    parser.add_argument(
        "--cases", default=",".join(case.key for case in CASES), help="subset of the project-vs-raw cases"
    )
    parser.add_argument(
        "--peers",
        default="all",
        help="all, none, or a comma-separated subset of pgqueuer,procrastinate,kombu,persistqueue",
    )
    parser.add_argument("--no-pump", dest="pump", action="store_false", help="skip the MessagePump case")
    parser.add_argument("--scale", action="store_true", help="run the scale measurements instead")
    parser.add_argument("--scale-sizes", type=sizes, help="queue sizes to drain [10000,100000,1000000]")
    parser.add_argument("--peek-sizes", type=sizes, help="sizes for peek_estimate vs count() [1000,1000000]")
    parser.add_argument(
        "--autovacuum-off",
        type=sizes,
        help="PostgreSQL sizes drained again with autovacuum off for the table [the largest size]",
    )
    parser.add_argument("--json", type=Path, help="result file [benchmarks/results/<name>.json]")
    args = parser.parse_args(argv)
    quick = args.quick
    args.n = args.n or (QUICK["n"] if quick else DEFAULT_N)
    args.n_single = args.n_single or min(args.n, QUICK["n_single"] if quick else DEFAULT_N_SINGLE)
    args.n_slow = args.n_slow or (QUICK["n_slow"] if quick else DEFAULT_N_SLOW)
    args.repeat = args.repeat or (QUICK["repeat"] if quick else DEFAULT_REPEAT)
    if args.n % BATCH or args.n_single % BATCH or min(args.n, args.n_single, args.n_slow) <= 0:
        parser.error(f"--n and --n-single must be positive multiples of {BATCH}")
    args.engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    if not args.engines or not set(args.engines) <= set(ENGINE_LABELS):
        parser.error("--engines takes postgresql and/or sqlite")
    chosen = {key.strip() for key in args.cases.split(",") if key.strip()}
    if not chosen <= {case.key for case in CASES}:
        parser.error("--cases takes " + ", ".join(case.key for case in CASES))
    args.cases = [case for case in CASES if case.key in chosen]
    if args.peers not in ("all", "none"):
        args.peers = {name.strip() for name in args.peers.split(",") if name.strip()}
        if not args.peers <= set(peers.RUNNERS):
            parser.error("--peers takes all, none or names from " + ", ".join(peers.RUNNERS))
    args.scale_sizes = args.scale_sizes or list(scale.QUICK_SIZES if quick else scale.DEFAULT_SIZES)
    args.peek_sizes = args.peek_sizes or list(scale.QUICK_PEEK_SIZES if quick else scale.DEFAULT_PEEK_SIZES)
    if args.autovacuum_off is None:
        args.autovacuum_off = [max(args.scale_sizes)]
    kind = "scale" if args.scale else "throughput"
    name = f"{kind}-quick" if quick else kind
    target = args.json or HERE / "results" / f"{name}.json"

    context = multiprocessing.get_context("spawn")
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="sqlqueue-bench-") as temporary:
        folder = Path(temporary)
        meta: dict[str, Any] = {
            "kind": kind,
            "date": started.isoformat(timespec="seconds"),
            "commit": provenance.commit(),
            "command": " ".join(["benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]),
            "quick": quick,
            "machine": machine(folder),
            "versions": versions(),
            "body_bytes": BODY_BYTES,
            "batch": BATCH,
            "n": args.n,
            "n_single": args.n_single,
            "n_slow": args.n_slow,
            "repeat": args.repeat,
            "postgresql_settings": "throwaway_postgres(durable=True): fsync, synchronous_commit and "
            "full_page_writes on, shared_buffers=128MB, TCP on 127.0.0.1",
            "sqlite_settings": "journal_mode=WAL, synchronous=FULL (what the transport sets)",
            "load_average_before": os.getloadavg(),
        }
        print(
            f"run.py {kind}: {meta['machine']['cpus']} CPUs ({meta['machine']['cpu']}), Python "
            f"{meta['versions']['python']}, SQLite {meta['versions']['sqlite']}; "
            + (
                f"sizes {args.scale_sizes}, peek at {args.peek_sizes}"
                if args.scale
                else f"N={args.n:,} (per-message {args.n_single:,}, slow peers {args.n_slow:,}), "
                f"{args.repeat} round(s)"
            ),
            flush=True,
        )
        body = (
            scale_run(args, context, folder, meta) if args.scale else throughput(args, context, folder, meta)
        )
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["load_average_after"] = os.getloadavg()
    document = {"meta": meta, **body}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {target} ({meta['seconds']} s)")
    import render

    print(render.summary_text(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
