"""The Spark drain benchmark's figures (benchmarks/spark_drain_bench.py), from docs/data/spark-drain.json: the
table of benchmarks/README.md and the summary sentence of docs/spark.md. The drain/JDBC ratio is computed
from the two msgs/s, as the benchmark computes it."""

from __future__ import annotations

from typing import Any

from pages.blocks import load_data, machine_brief, run_link

DATA_FILE = "spark-drain.json"
SOURCE = f"docs/data/{DATA_FILE}"


def machine_text(run: dict[str, Any]) -> str:
    """Where the run was measured: the recorded machine and its load, or the sentence an older run kept."""
    machine = run["machine"]
    if isinstance(machine, str):
        return machine
    before, after = run["load_average_before"][0], run["load_average_after"][0]
    return (
        f"{machine['cpus']} CPUs ({machine['cpu']}, {machine['ram_gib']} GiB), shared with other work: "
        f"1-minute load average {before:.1f} before the run and {after:.1f} after it"
    )


def provenance(data: dict[str, Any]) -> str:
    (run,) = data["runs"].values()
    return f"({run['when']}; commit {run['commit']}; {machine_text(run)}. Source: {run['source']}.)"


def _cpu(run: dict[str, Any]) -> str | None:
    machine = run.get("machine")
    return machine.get("cpu") if isinstance(machine, dict) else None


def _ratio(row: dict[str, Any]) -> str:
    return f"{row['drain_msgs_per_s'] / row['jdbc_msgs_per_s']:.2f}x"


def spark_drain_table(data: dict[str, Any]) -> list[str]:
    lines = [
        "| N | jdbc read+write msgs/s | drain msgs/s | drain / jdbc | drain: phase 1 / read+transform / "
        "write+commit s | JVM peak MB (drain / jdbc) | Python driver peak MB (drain / jdbc) |",
        "|---|---|---|---|---|---|---|",
    ]
    largest = max(row["n"] for row in data["rows"])
    for row in data["rows"]:
        ratio = _ratio(row)
        lines.append(
            f"| {row['n']:,} | {row['jdbc_msgs_per_s']:,} | {row['drain_msgs_per_s']:,} | "
            f"{f'**{ratio}**' if row['n'] == largest else ratio} | {row['drain_receive_s']:.1f} / "
            f"{row['drain_read_transform_s']:.1f} / {row['drain_write_commit_s']:.1f} | "
            f"{row['jvm_peak_mb_drain']:,} / {row['jvm_peak_mb_jdbc']:,} | "
            f"{row['python_peak_mb_drain']:,} / {row['python_peak_mb_jdbc']:,} |"
        )
    return [*lines, "", provenance(data)]


def spark_stream_table(data: dict[str, Any]) -> list[str]:
    """The streaming comparison (``--stream``): the sqlqueue stream into parquet files against the JDBC read
    written as parquet files, at each size the run measured (reading the job's columns, and every column
    where the run measured that too); a sentence when the run did not measure it."""
    rows = sorted((row for row in data["rows"] if "stream_msgs_per_s" in row), key=lambda row: row["n"])
    if not rows:
        return ["The run in the data file did not measure the stream (`spark_drain_bench.py --stream`)."]
    every = any("stream_all_columns_msgs_per_s" in row for row in rows)
    lines = [
        "| N | jdbc read + parquet msgs/s | sqlqueue stream msgs/s | stream / jdbc | "
        + ("stream, every column: msgs/s | every column / jdbc | " if every else "")
        + "micro-batches (maxMessagesPerTrigger) | JVM peak MB (stream / jdbc) | "
        "Python driver peak MB (stream / jdbc) |",
        "|---|---|---|---|" + ("---|---|" if every else "") + "---|---|---|",
    ]
    for row in rows:
        ratio = f"{row['stream_msgs_per_s'] / row['jdbc_file_msgs_per_s']:.2f}x"
        all_columns = ""
        if every:
            rate = row.get("stream_all_columns_msgs_per_s")
            all_columns = (
                f"{rate:,} | {rate / row['jdbc_file_msgs_per_s']:.2f}x | " if rate is not None else "- | - | "
            )
        lines.append(
            f"| {row['n']:,} | {row['jdbc_file_msgs_per_s']:,} | {row['stream_msgs_per_s']:,} | "
            f"{f'**{ratio}**' if row is rows[-1] else ratio} | {all_columns}{row['stream_micro_batches']} "
            f"({row['stream_per_trigger']:,}) | "
            f"{row['jvm_peak_mb_stream']:,} / {row['jvm_peak_mb_jdbc_file']:,} | "
            f"{row['python_peak_mb_stream']:,} / {row['python_peak_mb_jdbc_file']:,} |"
        )
    return [*lines, "", _stream_path(rows[-1]), *_stream_phases(rows[-1]), "", provenance(data)]


def spark_page_stream_table(data: dict[str, Any]) -> list[str]:
    """The stream's table as docs/spark.md shows it: the run's commit, date and load left to docs/runs.md."""
    (run,) = data["runs"].values()
    return [*spark_stream_table(data)[:-1], f"Measured on {machine_brief(run)}. {run_link(DATA_FILE)}"]


def _stream_path(row: dict[str, Any]) -> str:
    """How the measured stream took its messages (runs before ``stream_read_in_place`` was kept staged) and
    which columns it read (runs before ``stream_columns`` read every column)."""
    columns = row.get("stream_columns")
    read = (
        "The stream measured names the columns its job reads, "
        + ", ".join(f"`{name}`" for name in columns)
        + " (`.schema(source_columns(...))`, as Spark's JDBC read selects only the columns a query uses); "
        "the columns headed *every column* are the same stream without `.schema`, on the queue filled again. "
        if columns
        else "The stream measured read every column of the source. "
    )
    if row.get("stream_read_in_place"):
        return read + (
            "On PostgreSQL it held each micro-batch's messages in the queue (`readInPlace`, the default) and "
            "copied no body."
        )
    return read + "It received its messages into staging."


# Spark's names for the parts of a trigger (StreamingQueryProgress.durationMs), as the page explains them
STREAM_PHASES = (
    ("latestOffset", "take the next micro-batch's messages (`latestOffset`)"),
    ("addBatch", "read, transform and write the files (`addBatch`)"),
    # Spark's MicroBatchExecution calls the sources' commit of the previous batch inside walCommit
    (
        "walCommit",
        "write the offset log and commit the batch before to the source (`walCommit`)",
    ),
    ("commitOffsets", "write the commit log (`commitOffsets`)"),
    ("queryPlanning", "plan (`queryPlanning`)"),
)


def _stream_phases(row: dict[str, Any]) -> list[str]:
    """Where the largest stream's time went, from Spark's per-trigger durations summed over the query."""
    phases = row.get("stream_phase_s")
    if not phases:
        return []
    parts = [f"{label} {phases[key]:.1f} s" for key, label in STREAM_PHASES if key in phases]
    outside = row["stream_s"] - phases.get("triggerExecution", 0.0)
    total = row["stream_s"]
    return [
        "",
        f"Where the stream's {total:.1f} s at {row['n']:,} went (Spark's durations of each trigger, summed "
        "over the query): " + ", ".join(parts) + f"; {outside:.1f} s outside Spark's triggers.",
    ]


def _warm_up_wait(row: dict[str, Any]) -> str:
    """How phase 1 of the in-place drain split between holding and waiting for phase 2's warm-up."""
    hold, phase1 = row["drain_in_place_hold_s"], row["drain_in_place_phase1_s"]
    if phase1 - hold >= 0.1:
        return f"the hold took {hold:.1f} s, then phase 1 waited {phase1 - hold:.1f} s for the warm-up"
    return "the warm-up ended within the hold"


def spark_drain_notes(data: dict[str, Any]) -> list[str]:
    """The driver's memory at each size, and the run before this one (``previous``) for comparison."""
    rows = sorted(data["rows"], key=lambda row: row["n"])
    lines = [
        "- **The driver's memory at each size** (peak RSS): Python driver "
        + ", ".join(f"{row['python_peak_mb_drain']:,} MB at {row['n']:,}" for row in rows)
        + "; JVM (driver and executors in `local[2]`) "
        + ", ".join(f"{row['jvm_peak_mb_drain']:,} MB at {row['n']:,}" for row in rows)
        + "; the Python workers together "
        + ", ".join(
            f"{row['python_workers_peak_mb_drain']:,} MB at {row['n']:,}"
            for row in rows
            if "python_workers_peak_mb_drain" in row
        )
        + "."
    ]
    for row in rows:
        if "drain_staged_msgs_per_s" in row:
            staged = row["drain_staged_msgs_per_s"]
            lines.append(
                "- **Staging** (`--staged`: the drain again on a refilled queue with `--stage`, two "
                "receivers moving the messages into the staging table, the path of SQLite and SQL Server): "
                f"at {row['n']:,} it took {row['drain_staged_s']:.1f} s (receive / read+transform / "
                f"write+commit {row['drain_staged_receive_s']:.1f} / "
                f"{row['drain_staged_read_transform_s']:.1f} / {row['drain_staged_write_commit_s']:.1f} s), "
                f"{staged:,} msgs/s: **{staged / row['jdbc_msgs_per_s']:.2f}x** of the same baseline "
                f"(the default drain, {_path(row)}: {_ratio(row)}); JVM peak "
                f"{row['jvm_peak_mb_drain_staged']:,} MB, Python driver "
                f"{row['python_peak_mb_drain_staged']:,} MB."
            )
        if "source_staged_receive_s" in row:
            lines.append(
                "- **The data source's receive** (`--staged`, the queue filled again: what a batch read "
                '`format("sqlqueue")` runs as Spark plans it, two receiver threads of one process moving '
                f"the messages into staging): at {row['n']:,} it took "
                f"{row['source_staged_receive_s']:.1f} s, "
                f"against {row['drain_staged_receive_s']:.1f} s for the staged drain's two receive tasks."
            )
        if "drain_in_place_msgs_per_s" in row:
            in_place = row["drain_in_place_msgs_per_s"]
            lines.append(
                "- **Read in place** (`--in-place`: the drain again on a refilled queue with "
                "`read_in_place`, the driver's uncommitted DELETE instead of staging): "
                f"at {row['n']:,} it took {row['drain_in_place_s']:.1f} s (phase 1 / read+transform / "
                f"write+commit {row['drain_in_place_phase1_s']:.1f} / "
                f"{row['drain_in_place_read_transform_s']:.1f} / "
                f"{row['drain_in_place_write_commit_s']:.1f} s; {_warm_up_wait(row)}), {in_place:,} msgs/s: "
                f"**{in_place / row['jdbc_msgs_per_s']:.2f}x** of the same baseline "
                f"(staging: {_ratio(row)}); JVM peak {row['jvm_peak_mb_drain_in_place']:,} MB, Python "
                f"driver {row['python_peak_mb_drain_in_place']:,} MB."
            )
    lines += _cpu_lines(rows[-1])
    parent = data.get("parent_same_hour")
    if parent:
        (run,) = parent["runs"].values()
        this = {row["n"]: row for row in rows}
        for row in parent["rows"]:
            now = this.get(row["n"])
            lines.append(
                f"- **The parent commit in the same hour** (commit {run['commit']}, {run['when']}, 1-minute "
                f"load average {run['load_average_before'][0]:.1f} before): at {row['n']:,} the drain took "
                f"{row['drain_s']:.1f} s (receive / read+transform / write+commit "
                f"{row['drain_receive_s']:.1f} / {row['drain_read_transform_s']:.1f} / "
                f"{row['drain_write_commit_s']:.1f} s)"
                + (f" against this commit's {now['drain_s']:.1f} s" if now and "drain_s" in now else "")
                + f", and the baseline {row['jdbc_s']:.1f} s"
                + (f" against {now['jdbc_s']:.1f} s" if now and "jdbc_s" in now else "")
                + f": {_ratio(row)}. The baseline's own spread between the two runs is the noise of "
                "this shared machine."
            )
    previous = data.get("previous")
    if previous:
        (run,) = previous["runs"].values()
        (this_run,) = data["runs"].values()
        largest = max(previous["rows"], key=lambda row: row["n"])
        before_cpu, this_cpu = _cpu(run), _cpu(this_run)
        lines.append(
            f"- **The run before** ({run['when']}, commit {run['commit']}"
            + (
                f", on another machine: {before_cpu}, where this run had {this_cpu}; compare its ratios, "
                "not its seconds"
                if before_cpu and this_cpu and before_cpu != this_cpu
                else ""
            )
            + f"): {_ratio(largest)} at "
            f"{largest['n']:,} (receive / read+transform / write+commit {largest['drain_receive_s']:.1f} / "
            f"{largest['drain_read_transform_s']:.1f} / {largest['drain_write_commit_s']:.1f} s"
            + (
                f"; read in place {largest['drain_in_place_msgs_per_s'] / largest['jdbc_msgs_per_s']:.2f}x, "
                f"Python driver {largest['python_peak_mb_drain_in_place']:,} MB"
                if "drain_in_place_msgs_per_s" in largest
                else ""
            )
            + ")"
            + (
                f"; the stream {largest['stream_msgs_per_s'] / largest['jdbc_file_msgs_per_s']:.2f}x of its "
                f"baseline ({largest['stream_s']:.1f} s against {largest['jdbc_file_s']:.1f} s)."
                if "stream_msgs_per_s" in largest
                else "."
            )
        )
    return lines


DRAIN_GOAL = 0.5  # issue 19: the drain at >= 0.5x the plain JDBC read + write at 1,000,000 messages


def _path(row: dict[str, Any]) -> str:
    """How the default drain's phase 1 took the messages in this row (rows before the default held them
    in place ran with staging)."""
    return "held in place" if row.get("drain_read_in_place") else "staging"


# The applications of one size, as the data file names their CPU figures
CPU_APPLICATIONS = (
    ("jdbc", "JDBC read+write"),
    ("drain", "drain (default)"),
    ("drain_staged", "drain `--stage`"),
    ("jdbc_file", "JDBC read+parquet"),
    ("stream", "stream"),
)
CPU_KINDS = (
    ("jvm", "JVM"),
    ("python_driver", "Python driver"),
    ("python_workers", "Python workers"),
    ("postgresql", "PostgreSQL"),
    ("babelfish", "Babelfish server"),
)


def _cpu_lines(row: dict[str, Any]) -> list[str]:
    """CPU seconds by process of each application at one size, against the CPU seconds its wall time had
    on the machine's cores: whether the two cores were the bound."""
    measured = [(key, label) for key, label in CPU_APPLICATIONS if f"cpu_s_{key}" in row]
    if not measured:
        return []
    parts = []
    for key, label in measured:
        cpu, wall = row[f"cpu_s_{key}"], row[f"wall_s_{key}"]
        kinds = ", ".join(f"{name} {cpu[kind]:.1f}" for kind, name in CPU_KINDS if kind in cpu)
        disk = row.get(f"disk_mb_{key}")
        parts.append(
            f"{label} {kinds}: {sum(cpu.values()):.1f} CPU s in {wall:.1f} s of wall time "
            f"({sum(cpu.values()) / wall:.2f} cores busy on average"
            + (f", the machine's disks wrote {disk['written']:,} MB" if disk else "")
            + ")"
        )
    return [
        f"- **CPU seconds by process at {row['n']:,}** (each spark-submit whole, its JVM start included, "
        "sampled from /proc every 0.2 s; PostgreSQL: the server's processes over the same time; disk writes "
        "are the whole machine's, other work included): " + "; ".join(parts) + "."
    ]


def _goal_text(largest: dict) -> str:
    """Which ways of draining reach the goal at the largest size, from the row's own figures."""
    default = f"the default drain ({_path(largest)})" if "drain_read_in_place" in largest else "staging"
    ratios = {default: largest["drain_msgs_per_s"] / largest["jdbc_msgs_per_s"]}
    if "drain_staged_msgs_per_s" in largest:
        ratios["`--stage`"] = largest["drain_staged_msgs_per_s"] / largest["jdbc_msgs_per_s"]
    if "drain_in_place_msgs_per_s" in largest:
        ratios["`read_in_place`"] = largest["drain_in_place_msgs_per_s"] / largest["jdbc_msgs_per_s"]
    met = [name for name, ratio in ratios.items() if ratio >= DRAIN_GOAL]
    missed = [name for name, ratio in ratios.items() if ratio < DRAIN_GOAL]
    text = f" The goal, {DRAIN_GOAL}x of the baseline at {largest['n']:,} messages:"
    text += f" met by {' and '.join(met)}" if met else ""
    text += ("," if met else "") + f" missed by {' and '.join(missed)}" if missed else ""
    return text + "."


ENGINE_NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "babelfish": "Babelfish"}
# What each kind of baseline is, as the benchmark runs it (its docstring says the same)
BASELINE_TEXT = {
    "jdbc": (
        "**jdbc**: a Spark JDBC read of the queue table (2 partitions), the same parse in Spark SQL, a JDBC "
        "write of the rows (or parquet files, for the stream)"
    ),
    "raw": (
        "**raw**: no Spark; one Python process reads the queue table in 1,000-row fetches, parses the same "
        "fields and writes them with pyodbc's executemany, 1,000 rows a call, in one transaction (row by row "
        "on the wire through FreeTDS, which takes no fast_executemany), or as one parquet file with pyarrow "
        "for the stream; used where this machine has no JDBC driver for the engine"
    ),
}


def _engine_runs(data: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(engine, run, rows) of each engine the data file holds, PostgreSQL's run first."""
    engines = [("postgresql", data["runs"]["spark-drain"], data["rows"])]
    for engine, measured in data.get("engines", {}).items():
        (run,) = measured["runs"].values()
        engines.append((engine, run, measured["rows"]))
    return engines


def _engine_cpu_line(engine: str, row: dict[str, Any]) -> list[str]:
    """CPU seconds by process of each application of one engine's run, against its wall time: whether the
    two cores were the bound."""
    baseline = row.get("baseline", "jdbc")
    labels = {
        "jdbc": f"{baseline} read + write",
        "drain": "drain (default)",
        "jdbc_file": f"{baseline} read + parquet",
        "stream": "stream",
    }
    parts = []
    for key, label in labels.items():
        if f"cpu_s_{key}" not in row:
            continue
        cpu, wall = row[f"cpu_s_{key}"], row[f"wall_s_{key}"]
        kinds = ", ".join(f"{name} {cpu[kind]:.1f}" for kind, name in CPU_KINDS if cpu.get(kind))
        parts.append(
            f"{label}: {kinds or 'none measured'}, {sum(cpu.values()):.1f} CPU s in {wall:.1f} s of wall "
            f"time ({sum(cpu.values()) / wall:.2f} cores busy on average)"
        )
    where = (
        "SQLite runs inside the processes that open it"
        if engine == "sqlite"
        else f"{ENGINE_NAMES[engine]}: its server's processes over the same time"
    )
    return [
        f"- **{ENGINE_NAMES[engine]}: CPU seconds by process at {row['n']:,}** (each application whole, a "
        f"JVM's start included, sampled from /proc every 0.2 s; {where}): " + "; ".join(parts) + "."
    ]


def spark_engines_table(data: dict[str, Any]) -> list[str]:
    """Each engine's default drain and stream beside its own baseline, measured in the same run: a Spark
    JDBC read and write where the engine has a JDBC driver here, else the raw one; the ratios computed from
    the msgs/s."""
    lines = [
        "| engine | N | baseline | baseline read + write msgs/s | drain msgs/s (phase 1) | drain / baseline "
        "| baseline read + parquet msgs/s | stream msgs/s (columns read) | stream / baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    machines: list[str] = []
    kinds: set[str] = set()
    for engine, run, rows in _engine_runs(data):
        for row in sorted(rows, key=lambda row: row["n"]):
            kind = row.get("baseline", "jdbc")
            columns = row.get("stream_columns")
            read = f"{len(columns)} named" if columns else "every column"
            stream = (
                f"{row['jdbc_file_msgs_per_s']:,} | {row['stream_msgs_per_s']:,} ({read}) | "
                f"{row['stream_msgs_per_s'] / row['jdbc_file_msgs_per_s']:.2f}x"
                if "stream_msgs_per_s" in row
                else "not measured | | "
            )
            kinds.add(kind)
            lines.append(
                f"| {ENGINE_NAMES[engine]} | {row['n']:,} | {kind} | "
                f"{row['jdbc_msgs_per_s']:,} | {row['drain_msgs_per_s']:,} ({_path(row)}) | "
                f"{_ratio(row)} | {stream} |"
            )
        machines.append(f"{ENGINE_NAMES[engine]} on {machine_brief(run)}")
    for engine, _, rows in _engine_runs(data)[1:]:
        notes += _engine_cpu_line(engine, max(rows, key=lambda row: row["n"]))
    legend = [f"- {BASELINE_TEXT[kind]}." for kind in sorted(kinds)]
    return [*lines, "", *legend, f"- Measured: {'; '.join(machines)}.", *notes, "", run_link(DATA_FILE)]


def spark_page_blocks() -> dict[str, tuple[str, list[str]]]:
    """docs/spark.md's summary: the largest run against the baseline, and the smaller run's ratio."""
    data = load_data(DATA_FILE)
    stream = spark_page_stream_table(data)
    rows = sorted(data["rows"], key=lambda row: row["n"])
    largest = rows[-1]
    (run,) = data["runs"].values()
    return {
        "spark-drain-summary": (
            SOURCE,
            [
                f"On {machine_brief(run)}, the drain of {largest['n']:,} messages"
                + (f" (its default phase 1: {_path(largest)})" if "drain_read_in_place" in largest else "")
                + " ran "
                f"at {largest['drain_msgs_per_s']:,} msgs/s against the baseline's "
                f"{largest['jdbc_msgs_per_s']:,} ("
                + "; ".join(
                    f"{_ratio(row)}" + (f" at {row['n']:,}" if row is not largest else "")
                    for row in rows[::-1]
                )
                + ")."
                + "".join(
                    f" With `read_in_place` at {row['n']:,}: "
                    f"{row['drain_in_place_msgs_per_s'] / row['jdbc_msgs_per_s']:.2f}x."
                    for row in rows[::-1]
                    if "drain_in_place_msgs_per_s" in row
                )
                + "".join(
                    f" With `--stage` at {row['n']:,}: "
                    f"{row['drain_staged_msgs_per_s'] / row['jdbc_msgs_per_s']:.2f}x."
                    for row in rows[::-1]
                    if "drain_staged_msgs_per_s" in row
                )
                + _goal_text(largest)
                + " "
                + run_link(DATA_FILE)
            ],
        ),
        "spark-stream": (SOURCE, stream),
        "spark-engines": (SOURCE, spark_engines_table(data)),
    }
