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
  kombu's SQLAlchemy transport, persist-queue; each sends N messages of 1 KB and drains them, checked;
- handler throughput (section ``handlers``): the pump with batch 1 and batch 100 beside pgqueuer's consumer
  and procrastinate's worker, each calling a no-op handler per message, and the raw receive_batch they are
  judged against, all at one N;
- wake-up latency (section ``wakeup``, wakeup_bench.py): commit to handler call for an idle consumer.

``--only handlers,wakeup`` runs only those sections and, with ``--json`` naming an existing results file,
keeps its other sections.

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
import wakeup_bench  # noqa: E402
from core_bench import BATCH, BODY_BYTES, CASES, ENGINE_LABELS, Case, EngineBench  # noqa: E402

DEFAULT_N = 20_000
DEFAULT_N_SINGLE = 5_000
DEFAULT_N_SLOW = 1_000
DEFAULT_N_HANDLERS = 10_000
DEFAULT_REPEAT = 3
QUICK = {"n": 1_000, "n_single": 200, "n_slow": 100, "n_handlers": 200, "repeat": 1}
PUMP_CASE = Case("pump_4c", "MessagePump, monitor, concurrency 4", "receive", 1, 1)
SECTIONS = ("throughput", "handlers", "wakeup")
# the handler-throughput section: one level per row, "handler" (a no-op handler called per message) or
# "bare receive" (the rows fetched and deleted, nothing called), all at the same N on the same server
HANDLER_RAW_CASE = Case(
    "raw_receive_batch", f"raw receive_batch ({BATCH}/txn, 1 process)", "receive", BATCH, 1
)
HANDLER_PUMP_CASES = (
    Case("pump_batch_1", "MessagePump, batch 1, concurrency 4", "receive", 1, 1),
    Case("pump_batch_100", f"MessagePump, batch {BATCH}, concurrency 4", "receive", BATCH, 1),
)
HANDLER_PEERS = ("pgqueuer", "procrastinate")
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
def chosen_peer_cases(
    args: argparse.Namespace, keys: tuple[str, ...] | None = None
) -> tuple[list[Any], list[Any]]:
    """The peers to run (``keys``: only those) and the ones skipped, with the reason, noted once."""
    chosen, skipped = [], []
    for peer in peers.PEERS:
        if peer.engine not in args.engines or (args.peers != "all" and peer.key not in args.peers):
            continue
        if keys is not None and peer.key not in keys:
            continue
        missing = peers.missing_modules(peer)
        if missing:
            reason = f"not importable here: {', '.join(missing)} (run benchmarks/setup.sh)"
            skipped.append({"peer": peer.key, "engine": peer.engine, "reason": reason})
            print(f"note: skipping {peer.key} on {ENGINE_LABELS[peer.engine]}: {reason}", flush=True)
        else:
            chosen.append(peer)
    return chosen, skipped


@contextlib.contextmanager
def engine_bed(engine: str, folder: Path, meta: dict[str, Any]) -> Any:
    """One database for every section of the run on ``engine``: (bench, url, admin DSN or None)."""
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
        yield bench, url, admin_dsn


def throughput_engine(
    args: argparse.Namespace,
    context: Any,
    folder: Path,
    bed: Any,
    chosen_peers: list[Any],
    body: dict[str, Any],
) -> None:
    """The project-vs-raw cases, the pump case and the peers on one engine; rows appended to ``body``."""
    bench, _, admin_dsn = bed
    engine = bench.engine
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
                context,
                PUMP_CASE,
                "pump",
                args.n_single,
                runner="peers:pump_runner",
                options={"time_to_last_message": True},
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
        body["core"].append(core_bench.summarize(engine, case, count, samples[case.key]))
    if pump_samples:
        raw_4c = [sample["raw"]["msgs_per_s"] for sample in samples.get("receive_4c", [])]
        body["pump"].append(summarize_pump(engine, args.n_single, pump_samples, raw_4c))
    for peer in chosen_peers:
        if peer.engine == engine:
            body["peers"].append(summarize_peer(peer, peer_n(args, peer), peer_samples[peer.key_engine]))


# ---- handler throughput: every row at the same N, one level per comparison ---------------------------
def handler_row(
    engine: str,
    key: str,
    label: str,
    level: str,
    n: int,
    batch: int,
    concurrency: int,
    rounds: list[dict[str, Any]],
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "engine": engine,
        "engine_label": ENGINE_LABELS[engine],
        "case": key,
        "label": label,
        "level": level,
        "n": n,
        "batch": batch,
        "concurrency": concurrency,
        "available": bool(rounds),
        "rounds": rounds,
    }
    if rounds:
        row["msgs_per_s"] = spread([sample["msgs_per_s"] for sample in rounds])
        row["cpu_us_per_msg"] = statistics.median(sample["client_cpu_us_per_msg"] for sample in rounds)
    return row


def handlers_engine(
    args: argparse.Namespace,
    context: Any,
    folder: Path,
    bed: Any,
    chosen_peers: list[Any],
    section: dict[str, Any],
) -> None:
    """Raw receive_batch, the pump with batch 1 and batch 100, and the peers' consumers (PostgreSQL), all
    draining N messages on this engine, round after round in a rotating order; rows appended."""
    bench, _, admin_dsn = bed
    engine, n = bench.engine, args.n_handlers
    parameters = wakeup_bench.pump_parameters()
    runs: list[tuple[str, Any]] = [("raw", HANDLER_RAW_CASE)]
    unavailable: dict[str, str] = {}
    for case in HANDLER_PUMP_CASES:
        if case.batch > 1 and "batch_size" not in parameters:
            unavailable[case.key] = "not available in this build: MessagePump has no batch_size parameter"
            print(f"note: {ENGINE_LABELS[engine]} {case.label}: {unavailable[case.key]}", flush=True)
        else:
            runs.append(("pump", case))
    runs += [("peer", peer) for peer in chosen_peers if peer.engine == engine]
    samples: dict[str, list[dict[str, Any]]] = {case.key: [] for _, case in runs}
    for round_number in range(args.repeat):
        print(f" {ENGINE_LABELS[engine]} handlers, round {round_number + 1} of {args.repeat}", flush=True)
        shift = round_number % len(runs)
        for kind, case in runs[shift:] + runs[:shift]:
            if kind == "peer":
                peer_sample = peers.run_peer(context, case, n, admin_dsn, folder, round_number)
                sample = {
                    "seconds": peer_sample["receive_seconds"],
                    "msgs_per_s": peer_sample["receive_msgs_per_s"],
                    "client_cpu_us_per_msg": peer_sample["receive_cpu_us_per_msg"],
                    "send_msgs_per_s": peer_sample["send_msgs_per_s"],
                }
            elif kind == "raw":
                sample = bench.run_case(context, case, "raw", n)
            else:
                sample = bench.run_case(context, case, case.key, n, runner="peers:pump_runner")
            samples[case.key].append(sample)
            print(
                f"  {ENGINE_LABELS[engine]:<10} {case.key:<20} N={n:<7,} {sample['msgs_per_s']:>9,.0f} msgs/s"
                f"  ({sample['seconds']:.2f} s)",
                flush=True,
            )
    rows = section["rows"]
    rows.append(
        handler_row(
            engine,
            HANDLER_RAW_CASE.key,
            HANDLER_RAW_CASE.label,
            "bare receive",
            n,
            BATCH,
            1,
            samples["raw_receive_batch"],
        )
    )
    for case in HANDLER_PUMP_CASES:
        row = handler_row(
            engine, case.key, case.label, "handler", n, case.batch, 4, samples.get(case.key, [])
        )
        if case.key in unavailable:
            row["reason"] = unavailable[case.key]
        rows.append(row)
    for peer in chosen_peers:
        if peer.engine == engine:
            label = {
                "pgqueuer": f"pgqueuer consumer, batch {BATCH}, async no-op entrypoint",
                "procrastinate": "procrastinate worker, concurrency 4, async no-op task",
            }[peer.key]
            batch = peer.receive_batch
            rows.append(
                handler_row(
                    engine,
                    peer.key,
                    label,
                    "handler",
                    n,
                    batch,
                    4 if peer.key == "procrastinate" else 1,
                    samples[peer.key],
                )
            )
            rows[-1]["settings"] = peer.settings
    for skipped in section["skipped"]:
        if skipped["engine"] == engine:
            rows.append(
                {
                    "engine": engine,
                    "engine_label": ENGINE_LABELS[engine],
                    "case": skipped["peer"],
                    "label": skipped["peer"],
                    "level": "handler",
                    "n": n,
                    "available": False,
                    "reason": skipped["reason"],
                    "rounds": [],
                }
            )


# ---- wake-up latency ---------------------------------------------------------------------------------
def wakeup_engine(
    args: argparse.Namespace, context: Any, folder: Path, bed: Any, section: dict[str, Any]
) -> None:
    bench, url, admin_dsn = bed
    parameters = wakeup_bench.pump_parameters()
    settings = section["settings"]
    for case in wakeup_bench.CASES:
        if case.engine != bench.engine:
            continue
        if case.system == "pgqueuer" and args.peers != "all" and "pgqueuer" not in args.peers:
            continue
        reason = wakeup_bench.unavailable_reason(case, parameters)
        result = None
        if reason is None:
            arguments = wakeup_bench.pump_wake_up_arguments(case.wake_up or "", parameters) or {}
            result = wakeup_bench.run_case(context, case, url, admin_dsn, folder, settings, arguments)
            print(
                f"  {ENGINE_LABELS[bench.engine]:<10} wake-up {case.label:<50} p50 {result['p50_ms']:7.1f} ms"
                f"  p95 {result['p95_ms']:7.1f} ms  max {result['max_ms']:7.1f} ms",
                flush=True,
            )
        else:
            print(f"note: {ENGINE_LABELS[bench.engine]} wake-up {case.label}: {reason}", flush=True)
        section["rows"].append(wakeup_bench.row(case, settings, result, reason))


def section_meta(argv: list[str] | None) -> dict[str, Any]:
    """Provenance of one section: the commit and command it ran, when, and how busy the machine was."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": provenance.commit(),
        "command": " ".join(["benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "load_average_before": os.getloadavg(),
        "seconds": 0.0,
    }


@contextlib.contextmanager
def timed(meta: dict[str, Any]) -> Any:
    """Add the time of the block to the section's seconds (its engines run between other sections')."""
    started = time.monotonic()
    try:
        yield
    finally:
        meta["seconds"] = round(meta["seconds"] + time.monotonic() - started, 1)
        meta["load_average_after"] = os.getloadavg()


def throughput(
    args: argparse.Namespace, context: Any, folder: Path, meta: dict[str, Any], argv: list[str] | None = None
) -> dict[str, Any]:
    """The sections chosen by ``--only`` (all by default), engine after engine on one database each."""
    body: dict[str, Any] = {}
    chosen_peers: list[Any] = []
    if "throughput" in args.only:
        chosen_peers, skipped = chosen_peer_cases(args)
        body.update({"core": [], "pump": [], "peers": [], "skipped": skipped})
    if "handlers" in args.only:
        handler_peers, handler_skipped = chosen_peer_cases(args, HANDLER_PEERS)
        body["handlers"] = {
            "meta": section_meta(argv),
            "n": args.n_handlers,
            "repeat": args.repeat,
            "rows": [],
            "skipped": handler_skipped,
        }
    if "wakeup" in args.only:
        body["wakeup"] = {"meta": section_meta(argv), "settings": dict(args.wakeup), "rows": []}
    for engine in args.engines:
        with engine_bed(engine, folder, meta) as bed:
            if "throughput" in args.only:
                throughput_engine(args, context, folder, bed, chosen_peers, body)
            if "handlers" in args.only:
                with timed(body["handlers"]["meta"]):
                    handlers_engine(args, context, folder, bed, handler_peers, body["handlers"])
            if "wakeup" in args.only:
                with timed(body["wakeup"]["meta"]):
                    wakeup_engine(args, context, folder, bed, body["wakeup"])
    return body


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

                cluster = stack.enter_context(throwaway_postgres(durable=True, settings=args.server_setting))
                url = raw_target = cluster.url()
            else:
                raw_target = str(folder / "scale.db")
                url = f"sqlite:///{raw_target}"
            bench = EngineBench(engine, url, raw_target)
            stack.callback(bench.close)
            meta["versions"][engine] = bench.version()
            print(f"{ENGINE_LABELS[engine]} {meta['versions'][engine]}: scale", flush=True)
            started = time.monotonic()
            sizes = list(args.scale_sizes)
            if args.deep and engine == "postgresql":
                sizes.append(scale.DEEP_SIZE)
            result = scale.scale_engine(
                context,
                bench,
                sizes,
                args.peek_sizes,
                args.autovacuum_off,
                args.storage_wait,
                args.server_default_storage,
                args.no_write_back,
                args.throttled_vacuum,
                args.throttle_cost_delay,
            )
            if args.mixed_seconds and engine == "postgresql":
                print(f"  {ENGINE_LABELS[engine]}: mixed run, {args.mixed_seconds:.0f} s", flush=True)
                result["mixed"] = scale.mixed_run(
                    context, bench, args.mixed_seconds, args.mixed_rate, args.mixed_backlog
                )
                print(f"  mixed: {result['mixed']['windows']}", flush=True)
            result["seconds"] = time.monotonic() - started
            engines.append(result)
    return {"scale": engines}


def merged(target: Path, document: dict[str, Any]) -> dict[str, Any]:
    """A partial run (``--only``) written over an existing throughput results file: its sections replace
    theirs and the others stay, with the file's own metadata; each new section carries its own commit,
    date and command. Without such a file the partial document stands alone."""
    if not target.exists():
        return document
    existing = json.loads(target.read_text(encoding="utf-8"))
    if existing.get("meta", {}).get("kind") != "throughput":
        raise SystemExit(f"{target} is not a throughput results file: choose another --json")
    sections = document["meta"]["sections"]
    replaced = {key: value for key, value in document.items() if key != "meta"}
    existing.update(replaced)
    if "throughput" in sections:
        existing["meta"] = document["meta"]
    for engine, version in document["meta"]["versions"].items():
        existing["meta"].setdefault("versions", {}).setdefault(engine, version)
    print(f"note: kept the other sections of {target}; replaced {', '.join(sections)}", flush=True)
    return existing  # type: ignore[no-any-return]


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
    parser.add_argument(
        "--n-handlers",
        type=int,
        help=f"messages per run of the handler-throughput section, every row alike [{DEFAULT_N_HANDLERS:,}]",
    )
    parser.add_argument("--repeat", type=int, help=f"rounds; medians are reported [{DEFAULT_REPEAT}]")
    parser.add_argument(
        "--only",
        help="run only these sections of the throughput run: " + ", ".join(SECTIONS) + " (default: all); "
        "with --json naming an existing results file, the other sections in it are kept",
    )
    parser.add_argument(
        "--wakeup-sends",
        type=int,
        help=f"single sends per wake-up case [{wakeup_bench.SENDS}] (--quick: {wakeup_bench.QUICK['sends']})",
    )
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
    parser.add_argument(
        "--server-default-storage",
        type=sizes,
        default=[],
        help="PostgreSQL sizes drained again, in the same run, from a table with the server's default "
        "storage parameters instead of the package's [none]",
    )
    parser.add_argument(
        "--no-write-back",
        type=sizes,
        default=[],
        help="PostgreSQL sizes drained again, in the same run, by a session left at the server's "
        "backend_flush_after (0) instead of the package's [none]",
    )
    parser.add_argument(
        "--throttled-vacuum",
        type=sizes,
        default=[],
        help="PostgreSQL sizes drained again, in the same run, from a table whose autovacuum sleeps as the "
        "server's default says (autovacuum_vacuum_cost_delay reset) instead of running unthrottled [none]",
    )
    parser.add_argument(
        "--throttle-cost-delay",
        type=float,
        metavar="MS",
        help="--throttled-vacuum: set autovacuum_vacuum_cost_delay to MS milliseconds on those tables "
        "instead of resetting it to the server's [reset]",
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="--scale: a postgresql.conf setting for the run's PostgreSQL cluster (repeatable) [none]",
    )
    parser.add_argument(
        "--deep", action="store_true", help=f"--scale: also drain {scale.DEEP_SIZE:,} rows on PostgreSQL"
    )
    parser.add_argument(
        "--storage-wait",
        type=float,
        default=180.0,
        help="--scale: seconds to watch a PostgreSQL table's size after a drain (autovacuum) [180]",
    )
    parser.add_argument(
        "--mixed-seconds",
        type=float,
        default=0.0,
        help="--scale: run senders and receivers together on PostgreSQL for this long [0: not]",
    )
    parser.add_argument("--mixed-rate", type=int, default=10_000, help="msgs/s sent and received [10000]")
    parser.add_argument("--mixed-backlog", type=int, default=1_000_000, help="queued at the start [1000000]")
    parser.add_argument("--json", type=Path, help="result file [benchmarks/results/<name>.json]")
    args = parser.parse_args(argv)
    quick = args.quick
    args.n = args.n or (QUICK["n"] if quick else DEFAULT_N)
    args.n_single = args.n_single or min(args.n, QUICK["n_single"] if quick else DEFAULT_N_SINGLE)
    args.n_slow = args.n_slow or (QUICK["n_slow"] if quick else DEFAULT_N_SLOW)
    args.n_handlers = args.n_handlers or (QUICK["n_handlers"] if quick else DEFAULT_N_HANDLERS)
    args.repeat = args.repeat or (QUICK["repeat"] if quick else DEFAULT_REPEAT)
    if (
        args.n % BATCH
        or args.n_single % BATCH
        or args.n_handlers % BATCH
        or min(args.n, args.n_single, args.n_slow, args.n_handlers) <= 0
    ):
        parser.error(f"--n, --n-single and --n-handlers must be positive multiples of {BATCH}")
    args.wakeup = {
        "sends": wakeup_bench.QUICK["sends"] if quick else wakeup_bench.SENDS,
        "spacing_s": wakeup_bench.QUICK["spacing_s"] if quick else wakeup_bench.SPACING_S,
        "idle_s": wakeup_bench.QUICK["idle_s"] if quick else wakeup_bench.IDLE_S,
    }
    if args.wakeup_sends is not None:
        if args.wakeup_sends <= 0:
            parser.error("--wakeup-sends must be positive")
        args.wakeup["sends"] = args.wakeup_sends
    only = [name.strip() for name in (args.only or ",".join(SECTIONS)).split(",") if name.strip()]
    if not only or not set(only) <= set(SECTIONS):
        parser.error("--only takes " + ", ".join(SECTIONS) + " (comma-separated)")
    if args.server_setting and not args.scale:
        parser.error("--server-setting is for --scale runs")
    if args.throttle_cost_delay is not None and not (
        args.throttled_vacuum and 0 <= args.throttle_cost_delay <= 100
    ):
        parser.error("--throttle-cost-delay takes 0 to 100 (ms) and needs --throttled-vacuum")
    settings = [entry.partition("=") for entry in args.server_setting]
    if any(not name.strip() or not sep or not value.strip() for name, sep, value in settings):
        parser.error("--server-setting takes NAME=VALUE")
    if any(
        not name.strip().replace("_", "").isalnum() or "'" in value or "\n" in value
        for name, _, value in settings
    ):
        parser.error("--server-setting: NAME is letters, digits and _, VALUE holds no quote or line break")
    args.server_setting = {name.strip(): value.strip() for name, _, value in settings}
    if args.only and args.scale:
        parser.error("--only chooses sections of the throughput run, not of --scale")
    args.only = only
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
            "n_handlers": args.n_handlers,
            "sections": args.only if not args.scale else [],
            "repeat": args.repeat,
            "postgresql_settings": "throwaway_postgres(durable=True): fsync, synchronous_commit and "
            "full_page_writes on, shared_buffers=128MB, TCP on 127.0.0.1"
            + "".join(f", {name}={value}" for name, value in args.server_setting.items()),
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
            scale_run(args, context, folder, meta)
            if args.scale
            else throughput(args, context, folder, meta, argv)
        )
    meta["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    meta["load_average_after"] = os.getloadavg()
    document = (
        merged(target, {"meta": meta, **body})
        if not args.scale and set(args.only) != set(SECTIONS)
        else {"meta": meta, **body}
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {target} ({meta['seconds']} s)")
    import render

    print(render.summary_text(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
