"""Scale: receiving from deep queues, what the drain leaves behind, peek_estimate against count(), memory.

Run through ``run.py --scale``. For each engine and each size (default 10,000, 100,000 and 1,000,000
queued messages) a fresh queue is created through the project and filled with one bulk statement
(PostgreSQL: ``generate_series``; SQLite: a recursive CTE), rows shaped as the project writes them:
1,024-byte body, the standard headers with the row's own Id. One consumer process then drains it with
``queue.receive(max_messages=100)`` until empty, noting the time at every tenth of the queue (does deleting
from the head slow down as the queue empties?) and its resident memory (RSS from /proc) every 100
receives. Beside each tenth's rate it notes what the tenth coincided with (``decile_activity``): the
host's I/O stall time (Linux PSI), the page cache not yet written to disk, and on PostgreSQL the
checkpoints and whether a vacuum of the table was running. Before and after the drain the table's storage
is recorded: on PostgreSQL its size and live/dead tuples (with autovacuum on, the server's default, and
once with autovacuum off for the table), then after a plain ``VACUUM``; on SQLite the page count and the
freelist, then after a refill of a tenth of the rows (do freed pages get reused?). ``peek_estimate()`` and
``count()`` are timed on queues of 1,000 and 1,000,000 rows.

On PostgreSQL, after each drain with autovacuum on, the table's size is polled every few seconds for up
to ``storage_wait`` seconds (``--storage-wait``) to see whether autovacuum gives the storage back without a
manual VACUUM, and how long that takes. ``--deep`` adds a 10,000,000-row queue on PostgreSQL.
``--mixed-seconds N`` runs senders and receivers together for N seconds at a steady backlog and notes the
receive rate and the receive's latency every ten seconds (does a queue that runs for a long time hold its
rate?).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from core_bench import BATCH, BODY, EngineBench, raw_connect, run_processes

from airflow_provider_sqlqueue.dialects.postgres import PostgresDialect

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
RSS_EVERY = 100  # receives between RSS samples
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
DEEP_SIZE = 10_000_000  # PostgreSQL only, with --deep
STORAGE_POLL = 5.0  # seconds between size checks after a drain
# what ``RESET`` takes back: the parameters the package gives a PostgreSQL queue table at creation
STORAGE_PARAMETER_NAMES = tuple(name for name, _ in PostgresDialect.default_storage_parameters)
BACK_FRACTION = 0.02  # the storage counts as given back at 2 % of its size before the drain (or 1 MiB)
DEFAULT_PEEK_SIZES = (1_000, 1_000_000)
QUICK_SIZES = (1_000, 5_000)
QUICK_PEEK_SIZES = (1_000, 5_000)


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE_SIZE


# ---- the draining worker (runs in a spawned process through core_bench.run_processes) -------------------
def io_stall_ms() -> float | None:
    """Milliseconds so far in which some task of this host waited for I/O (Linux PSI), or None."""
    try:
        text = Path("/proc/pressure/io").read_text()
    except OSError:
        return None
    return int(text.split("total=", 1)[1].split()[0]) / 1000


def dirty_mb() -> int | None:
    """Page cache not yet written to disk (Dirty + Writeback of /proc/meminfo), in MiB, or None."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except OSError:
        return None
    return (int(fields["Dirty"].split()[0]) + int(fields["Writeback"].split()[0])) // 1024


def server_activity(transport: Any, table: str) -> dict[str, Any]:
    """PostgreSQL: checkpoints so far and whether a vacuum of ``table`` is running now."""
    with transport.connection() as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT current_setting('server_version_num')::int", ())
        before_17 = int(cursor.fetchone()[0]) < 170000
        cursor.execute(
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
            if before_17
            else "SELECT num_timed + num_requested FROM pg_stat_checkpointer",
            (),
        )
        done = int(cursor.fetchone()[0])
        cursor.execute("SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = to_regclass(%s)", (table,))
        vacuuming = int(cursor.fetchone()[0]) > 0
        connection.commit()
    return {"checkpoints": done, "vacuuming": vacuuming}


def drain_runner(task: dict[str, Any]) -> Any:
    from airflow_provider_sqlqueue.transport import open_transport

    transport = open_transport(task["url"])
    queue = transport.queue(task["table"])
    _ = queue._sql
    with transport.connection():
        pass
    postgres = transport.dialect.name == "postgresql"
    total = task["total"]
    marks = [round(total * step / 10) for step in range(1, 11)]
    info: dict[str, Any] = {"rss_start": rss_bytes()}
    if postgres:
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute("SHOW backend_flush_after", ())
            info["backend_flush_after"] = str(cursor.fetchone()[0])
            connection.rollback()

    def host_sample() -> dict[str, Any]:
        sample: dict[str, Any] = {"io_stall_ms": io_stall_ms(), "dirty_mb": dirty_mb()}
        if postgres:
            sample.update(server_activity(transport, task["qualified"]))
        return sample

    def run() -> list[Any]:
        received = receives = 0
        next_mark = 0
        started = time.monotonic()
        times: list[tuple[int, float]] = []
        samples: list[tuple[int, int]] = [(0, info["rss_start"])]
        host = [host_sample()]
        while True:
            with queue.receive(max_messages=BATCH) as batch:
                got = len(batch)
            receives += 1
            if not got:
                break
            received += got
            while next_mark < len(marks) and received >= marks[next_mark]:
                times.append((received, time.monotonic() - started))
                host.append(host_sample())
                next_mark += 1
            if receives % RSS_EVERY == 0:
                samples.append((received, rss_bytes()))
        samples.append((received, rss_bytes()))
        info.update(received=received, receives=receives, marks=times, rss=samples, host=host)
        return []

    return run, transport.close, info


def tenths_activity(host: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per tenth of a drain: the host's I/O stall (ms), its unwritten page cache at the tenth's end (MiB),
    and on PostgreSQL the checkpoints begun or ended and whether a vacuum of the table was running at the
    tenth's end. What a slow tenth coincided with."""
    tenths = []
    for before, after in itertools.pairwise(host):
        stall = None
        if before["io_stall_ms"] is not None and after["io_stall_ms"] is not None:
            stall = round(after["io_stall_ms"] - before["io_stall_ms"])
        tenth: dict[str, Any] = {"io_stall_ms": stall, "dirty_mb": after["dirty_mb"]}
        if "checkpoints" in after:
            tenth["checkpoints"] = after["checkpoints"] - before["checkpoints"]
            tenth["vacuuming"] = after["vacuuming"]
        tenths.append(tenth)
    return tenths


def server_flush_url(url: str) -> str:
    """``url`` with its session's ``backend_flush_after`` at the server's default, 0 (``scale_engine``)."""
    from sqlalchemy.engine import make_url

    return make_url(url).update_query_dict({"options": "-c backend_flush_after=0"}).render_as_string(False)


# ---- filling with bulk SQL -----------------------------------------------------------------------------
def template() -> tuple[str, str, str | None]:
    """The project's standard headers for one message, and the text of its Id (replaced per row)."""
    from airflow_provider_sqlqueue.transport.message import OutgoingMessage

    message = OutgoingMessage.of(BODY)
    return message.encoded_headers(), str(message.id), message.correlation_id


def fill(bench: EngineBench, table: str, rows: int, first: int = 1) -> float:
    """Insert ``rows`` messages in one statement and one transaction; return the seconds it took.

    The Ids are deterministic (``%08x-0000-4000-8000-%012x`` of the row number) so both engines can build
    them in SQL; the headers and the CorrelationId carry each row's own Id, as the project writes them."""
    headers, template_id, correlation = template()
    started = time.monotonic()
    if bench.engine == "postgresql":
        statement = (
            f"INSERT INTO {table} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
            "SELECT u::uuid, replace(%s, %s, u), NULL, true, NULL, replace(%s, %s, u), %s FROM ("
            "SELECT lpad(to_hex(i), 8, '0') || '-0000-4000-8000-' || lpad(to_hex(i), 12, '0') AS u "
            "FROM generate_series(%s::bigint, %s::bigint) AS i) AS g"
        )
        with contextlib.closing(raw_connect("postgresql", bench.raw_target)) as connection:
            connection.execute(
                statement,
                (
                    correlation or template_id,
                    template_id,
                    headers,
                    template_id,
                    BODY,
                    first,
                    first + rows - 1,
                ),
            )
            connection.commit()
    else:
        statement = (
            "WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i < ?) "
            f"INSERT INTO {table} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) "
            "SELECT u, replace(?, ?, u), NULL, 1, NULL, replace(?, ?, u), ? FROM ("
            "SELECT printf('%08x-0000-4000-8000-%012x', i, i) AS u FROM g)"
        )
        with contextlib.closing(raw_connect("sqlite", bench.raw_target)) as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                statement,
                (
                    first,
                    first + rows - 1,
                    correlation or template_id,
                    template_id,
                    headers,
                    template_id,
                    BODY,
                ),
            )
            connection.execute("COMMIT")
    return time.monotonic() - started


# ---- storage figures -----------------------------------------------------------------------------------
def storage(bench: EngineBench, table: str, name: str) -> dict[str, Any]:
    if bench.engine == "postgresql":
        time.sleep(1.1)  # backends publish their table counters at most once a second (PostgreSQL 15)
        bench.admin.execute("SELECT pg_stat_clear_snapshot()")
        live, dead, vacuums, autovacuums = bench.query(
            "SELECT n_live_tup, n_dead_tup, vacuum_count, autovacuum_count FROM pg_stat_user_tables "
            f"WHERE relname = '{name}'"
        )[0]
        size, heap, options = bench.query(
            f"SELECT pg_total_relation_size('{table}'), pg_relation_size('{table}'), "
            f"(SELECT reloptions FROM pg_class WHERE oid = '{table}'::regclass)"
        )[0]
        return {
            "storage_parameters": list(options or []),
            "total_bytes": int(size),
            "heap_bytes": int(heap),
            "live_tuples": int(live),
            "dead_tuples": int(dead),
            "vacuum_count": int(vacuums),
            "autovacuum_count": int(autovacuums),
        }
    page_size = bench.query("PRAGMA page_size")[0][0]
    pages = bench.query("PRAGMA page_count")[0][0]
    free = bench.query("PRAGMA freelist_count")[0][0]
    return {
        "page_size": int(page_size),
        "page_count": int(pages),
        "freelist_count": int(free),
        "file_bytes": Path(bench.raw_target).stat().st_size,
    }


def storage_return(bench: EngineBench, table: str, name: str, before: int, wait: float) -> dict[str, Any]:
    """Poll the table's size after a drain until autovacuum gave it back or ``wait`` seconds passed."""
    threshold = max(1 << 20, int(before * BACK_FRACTION))
    started = time.monotonic()
    samples: list[tuple[float, int, int]] = []
    back_after = None
    while True:
        figures = storage(bench, table, name)
        at = round(time.monotonic() - started, 1)
        samples.append((at, figures["total_bytes"], figures["autovacuum_count"]))
        if figures["total_bytes"] <= threshold:
            back_after = at
            break
        if at >= wait:
            break
        time.sleep(STORAGE_POLL)
    return {
        "wait_seconds": wait,
        "threshold_bytes": threshold,
        "back_after_seconds": back_after,
        "samples": samples,
    }


def time_calls(function: Any, calls: int) -> dict[str, float]:
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - started)
    return {
        "median_us": statistics.median(seconds) * 1e6,
        "min_us": min(seconds) * 1e6,
        "max_us": max(seconds) * 1e6,
        "calls": calls,
    }


def peek_and_count(bench: EngineBench, name: str, rows: int) -> dict[str, Any]:
    from airflow_provider_sqlqueue.transport import open_transport

    with open_transport(bench.url) as transport:
        queue = transport.queue(name)
        estimate = queue.peek_estimate()
        exact = queue.count()
        if exact != rows:
            raise AssertionError(f"{bench.engine} {name}: count() says {exact}, filled {rows}")
        queue.peek_estimate()  # warm
        return {
            "rows": rows,
            "estimate": estimate,
            "peek_estimate": time_calls(queue.peek_estimate, 200),
            "count": time_calls(queue.count, 5 if rows > 100_000 else 50),
        }


# ---- one engine -----------------------------------------------------------------------------------------
def scale_engine(
    context: Any,
    bench: EngineBench,
    sizes: list[int],
    peek_sizes: list[int],
    autovacuum_off_sizes: list[int],
    storage_wait: float = 0.0,
    server_default_sizes: list[int] | None = None,
    no_write_back_sizes: list[int] | None = None,
    throttled_sizes: list[int] | None = None,
    throttle_cost_delay_ms: float | None = None,
) -> dict[str, Any]:
    """All scale measurements on one engine. On PostgreSQL, ``server_default_sizes`` are drained once more
    from a table whose storage parameters are reset to the server's defaults, in the same run: the pair
    shows what the package's per-table settings change, with the commit, the hour and the machine alike.
    ``no_write_back_sizes`` are drained once more by a session left at the server's
    ``backend_flush_after`` (0: the URL's ``options`` say so, which the package keeps): the pair shows what
    the package's session setting changes. ``throttled_sizes`` are drained once more from a table whose
    ``autovacuum_vacuum_cost_delay`` is reset to the server's (autovacuum sleeps between pages), or set to
    ``throttle_cost_delay_ms``, every other parameter the package's: the pair shows what the package's
    unthrottled vacuum costs a drain and gives its storage."""
    result: dict[str, Any] = {"engine": bench.engine, "drains": [], "peek": []}
    label = bench.engine
    for rows in sorted(set(peek_sizes) - set(sizes)):  # peek-only sizes: fill, time, drop
        name = f"scale_peek_{rows}"
        statements, _ = bench.provision(name, 0)
        fill(bench, statements["table"], rows)
        bench.settle(statements["table"])
        result["peek"].append(peek_and_count(bench, name, rows))
        print(f"  {label} peek_estimate/count at {rows:,} rows: {result['peek'][-1]}", flush=True)
        bench.drop(name)
    # each drain is the package's setup or differs from it in one way, named by its table's suffix
    variants = [(rows, "") for rows in sorted(sizes)]
    if bench.engine == "postgresql":
        for suffix, chosen in (
            ("_noav", autovacuum_off_sizes),
            ("_plain", server_default_sizes),
            ("_nowb", no_write_back_sizes),
            ("_throttled", throttled_sizes),
        ):
            variants += [(rows, suffix) for rows in sorted(chosen or [])]
    for rows, suffix in variants:
        autovacuum, package_storage = suffix != "_noav", suffix != "_plain"
        write_back, throttled = suffix != "_nowb", suffix == "_throttled"
        name = f"scale_{rows}{suffix}"
        statements, _ = bench.provision(name, 0)
        table = statements["table"]
        if not autovacuum:
            bench.admin.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        if not package_storage:
            bench.admin.execute(f"ALTER TABLE {table} RESET ({', '.join(STORAGE_PARAMETER_NAMES)})")
        if throttled and throttle_cost_delay_ms is None:
            bench.admin.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_cost_delay)")
        elif throttled:
            bench.admin.execute(
                f"ALTER TABLE {table} SET (autovacuum_vacuum_cost_delay = {float(throttle_cost_delay_ms):g})"
            )
        fill_seconds = fill(bench, table, rows)
        bench.settle(table)
        drain: dict[str, Any] = {
            "rows": rows,
            "autovacuum": autovacuum if bench.engine == "postgresql" else None,
            "package_storage_parameters": package_storage if bench.engine == "postgresql" else None,
            "package_write_back": write_back if bench.engine == "postgresql" else None,
            "throttled_vacuum": throttled if bench.engine == "postgresql" else None,
            "throttle_cost_delay_ms": throttle_cost_delay_ms if throttled else None,
            "fill_seconds": fill_seconds,
            "fill_rows_per_s": rows / fill_seconds,
            "before": storage(bench, table, name),
        }
        if autovacuum and rows in peek_sizes:
            result["peek"].append(peek_and_count(bench, name, rows))
            print(f"  {label} peek_estimate/count at {rows:,} rows: {result['peek'][-1]}", flush=True)
        task = {
            "runner": "scale:drain_runner",
            "url": bench.url if write_back else server_flush_url(bench.url),
            "table": name,
            "qualified": table,
            "total": rows,
        }
        seconds, _, infos = run_processes(context, [task])
        info = infos[0]
        left = bench.count(table)
        if info["received"] != rows or left:
            raise AssertionError(f"{label} drain of {rows:,}: received {info['received']:,}, {left:,} left")
        marks = info["marks"]
        segments = []
        previous_count, previous_time = 0, 0.0
        for count, at in marks:
            segments.append((count - previous_count) / (at - previous_time) if at > previous_time else 0.0)
            previous_count, previous_time = count, at
        rss = [value for _, value in info["rss"]]
        drain.update(
            seconds=seconds,
            msgs_per_s=rows / seconds,
            decile_msgs_per_s=segments,
            decile_activity=tenths_activity(info["host"]),
            receives=info["receives"],
            rss_samples=info["rss"],
            rss_start=info["rss_start"],
            rss_peak=max(rss),
            rss_end=rss[-1],
            cpu_seconds=info["cpu_seconds"],
            backend_flush_after=info.get("backend_flush_after"),
            after=storage(bench, table, name),
        )
        if bench.engine == "postgresql":
            if autovacuum and storage_wait > 0:
                before_bytes = drain["before"]["total_bytes"]
                drain["storage_return"] = storage_return(bench, table, name, before_bytes, storage_wait)
                print(f"  {label} storage after the drain of {rows:,}: {drain['storage_return']}", flush=True)
            bench.admin.execute(f"VACUUM {table}")
            drain["after_vacuum"] = storage(bench, table, name)
        else:
            refill = max(rows // 10, 1)
            fill(bench, table, refill, first=rows + 1)
            drain["refill_rows"] = refill
            drain["after_refill"] = storage(bench, table, name)
        result["drains"].append(drain)
        print(
            f"  {label} drain {rows:>9,} rows{'' if autovacuum in (True, None) else ' (autovacuum off)'}"
            f"{'' if package_storage else ' (server default storage parameters)'}"
            f"{'' if write_back else ' (backend_flush_after 0)'}"
            f"{_throttle_label(throttle_cost_delay_ms) if throttled else ''}: "
            f"fill {fill_seconds:.1f} s, drain {seconds:.1f} s = {rows / seconds:,.0f} msgs/s; deciles "
            + " ".join(f"{value:,.0f}" for value in segments)
            + "; I/O stall ms per tenth "
            + " ".join(str(tenth["io_stall_ms"]) for tenth in drain["decile_activity"])
            + f"; RSS start/peak/end {drain['rss_start'] / 2**20:.0f}/{drain['rss_peak'] / 2**20:.0f}/"
            f"{drain['rss_end'] / 2**20:.0f} MiB; before {drain['before']}; after {drain['after']}",
            flush=True,
        )
        bench.drop(name)
        if bench.engine == "sqlite":
            with contextlib.suppress(sqlite3.Error):
                bench.admin.execute("VACUUM")  # give the file back before the next size
    return result


def _throttle_label(cost_delay_ms: float | None) -> str:
    if cost_delay_ms is None:
        return " (autovacuum_vacuum_cost_delay: the server default)"
    return f" (autovacuum_vacuum_cost_delay = {cost_delay_ms:g} ms)"


# ---- senders and receivers together at a steady backlog ------------------------------------------------
MIXED_WINDOW = 10.0  # seconds per reported window


def mixed_runner(task: dict[str, Any]) -> Any:
    """A paced sender (``role`` send) or receiver (``role`` receive) on one queue for ``seconds``."""
    from airflow_provider_sqlqueue.transport import open_transport

    transport = open_transport(task["url"])
    queue = transport.queue(task["table"])
    _ = queue._sql
    with transport.connection():
        pass
    per_call = BATCH / task["rate"]  # seconds per batch of 100 at this process's rate
    info: dict[str, Any] = {"role": task["role"]}

    def run() -> list[Any]:
        started = time.monotonic()
        windows: list[dict[str, Any]] = []
        count, latencies, window_start = 0, [], started
        due = started
        while True:
            now = time.monotonic()
            if now - started >= task["seconds"]:
                break
            if now < due:
                time.sleep(due - now)
            due += per_call
            call = time.monotonic()
            if task["role"] == "send":
                queue.send_batch([BODY] * BATCH)
                count += BATCH
            else:
                with queue.receive(max_messages=BATCH) as batch:
                    count += len(batch)
            latencies.append(time.monotonic() - call)
            if time.monotonic() - window_start >= MIXED_WINDOW:
                end = time.monotonic()
                windows.append(
                    {
                        "at": round(end - started, 1),
                        "msgs_per_s": count / (end - window_start),
                        "p50_ms": statistics.median(latencies) * 1e3,
                        "p95_ms": sorted(latencies)[int(len(latencies) * 0.95) - 1] * 1e3,
                    }
                )
                count, latencies, window_start = 0, [], end
        info["windows"] = windows
        return []

    return run, transport.close, info


def mixed_run(
    context: Any, bench: EngineBench, seconds: float, rate: int, backlog: int, receivers: int = 2
) -> dict[str, Any]:
    """A queue filled with ``backlog`` messages, then one sender at ``rate`` msgs/s and ``receivers``
    receivers sharing the same rate, for ``seconds``: the backlog stays where it was, the queue's dead
    rows pile up behind the receivers, and every window notes the receive rate and latency."""
    name = "scale_mixed"
    statements, _ = bench.provision(name, 0)
    table = statements["table"]
    fill(bench, table, backlog)
    bench.settle(table)
    before = storage(bench, table, name)
    tasks = [
        {
            "runner": "scale:mixed_runner",
            "url": bench.url,
            "table": name,
            "role": "send",
            "rate": rate,
            "seconds": seconds,
        }
    ]
    tasks += [
        {
            "runner": "scale:mixed_runner",
            "url": bench.url,
            "table": name,
            "role": "receive",
            "rate": rate / receivers,
            "seconds": seconds,
        }
        for _ in range(receivers)
    ]
    elapsed, _, infos = run_processes(context, tasks)
    left = bench.count(table)
    after = storage(bench, table, name)
    windows = [info["windows"] for info in infos if info["role"] == "receive"]
    merged = []
    for index in range(min(len(w) for w in windows)):
        merged.append(
            {
                "at": windows[0][index]["at"],
                "receive_msgs_per_s": sum(w[index]["msgs_per_s"] for w in windows),
                "receive_p50_ms": statistics.median(w[index]["p50_ms"] for w in windows),
                "receive_p95_ms": max(w[index]["p95_ms"] for w in windows),
            }
        )
    sends = next(info["windows"] for info in infos if info["role"] == "send")
    bench.drop(name)
    return {
        "seconds": elapsed,
        "rate": rate,
        "backlog": backlog,
        "receivers": receivers,
        "left": left,
        "before": before,
        "after": after,
        "windows": merged,
        "send_msgs_per_s": [w["msgs_per_s"] for w in sends],
    }
