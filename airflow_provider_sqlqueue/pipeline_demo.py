"""README command 1: run the showcase DAG (``sqlqueue_spark_pipeline``) end to end with ``dag.test()``.

``python -m airflow_provider_sqlqueue.pipeline_demo [--orders N] [--max-messages N] [--keep]`` makes a
temporary AIRFLOW_HOME on SQLite, points ``sqlqueue_default`` at a new SQLite queue file (or at what
``--queue-connection`` gives, e.g. a PostgreSQL connection as JSON) and ``spark_default`` at ``local[2]``,
migrates Airflow's database, runs the DAG through ``dag.test()`` in a child process, shows its progress and
ends with the pipeline's summary. The child's full output is kept in ``<home>/dag-test.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAG_ID = "sqlqueue_spark_pipeline"
REPO = Path(__file__).resolve().parent.parent
PROGRESS = [
    (re.compile(r"\[DAG TEST\] starting task_id=(\S+)"), "task {0}"),
    (re.compile(r"(sent \d+ orders; the order feed .*)"), "  {0}"),
    (
        re.compile(r"queue \S+ holds (\d+) message\(s\) \(\w+\); waiting for (\d+)"),
        "  queue holds {0}, waiting for {1}",
    ),
    (re.compile(r"\[DAG TEST\] running trigger in line"), "  deferred: the trigger polls the queue"),
    (re.compile(r"\[DAG TEST\] Trigger completed"), "  trigger fired"),
    (re.compile(r"\[sqlqueue\] (.*)"), "  spark: {0}"),
    (re.compile(r"Spark bridge tables ready: (.*)"), "  bridge tables: {0}"),
    (re.compile(r"(purged \d+ expired message\(s\) from \S+)"), "  {0}"),
    (re.compile(r"created (\[.*?\]|none); already there: (.*)"), "  queues created: {0}; already there: {1}"),
    (re.compile(r"(Task failed.*|ERROR - .*|Traceback .*)"), "  !! {0}"),
]


def _child(run_conf: str) -> int:
    """Inside the prepared environment: load the DAG from the dags folder and run dag.test()."""
    from airflow.configuration import conf
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(conf.get("core", "dags_folder"))
    dag = bag.get_dag(DAG_ID)
    if dag is None:
        print(f"no DAG {DAG_ID}; import errors: {bag.import_errors}", flush=True)
        return 3
    run = dag.test(run_conf=json.loads(run_conf))
    state = getattr(run.state, "value", run.state)
    print(f"DAGRUN_STATE={state}", flush=True)
    return 0 if state == "success" else 1


_LOG_TAIL = re.compile(r"\s+\[[\w.]+\]\s+loc=\S+\s*$|\s+loc=\S+\s*$")


def _progress(line: str) -> str | None:
    """The one-line progress note for a line of the DAG run's output, if it is worth showing."""
    for pattern, template in PROGRESS:
        match = pattern.search(line)
        if match:
            return _LOG_TAIL.sub("", template.format(*match.groups()))
    return None


def _environment(home: Path, queue_connection: str | None, master: str, dags_folder: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": master}),
        AIRFLOW_CONN_SQLQUEUE_DEFAULT=queue_connection
        or json.dumps(
            {"conn_type": "sqlqueue", "host": str(home / "queues.db"), "extra": {"engine": "sqlite"}}
        ),
        PATH=bindir + os.pathsep + env.get("PATH", ""),  # spark-submit of this environment
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP=env.get("SPARK_LOCAL_IP", "127.0.0.1"),
    )
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=20_000, help="orders to send (default 20000)")
    parser.add_argument("--max-messages", type=int, default=15_000, help="drain at most (default 15000)")
    parser.add_argument("--queue-connection", help="sqlqueue_default as an Airflow connection JSON or URI")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--dags-folder", type=Path, default=REPO / "dags_examples")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return _child(args.child)

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("demo: Spark needs a Java runtime (17+): apt-get install default-jre-headless", file=sys.stderr)
        return 2
    if not (args.dags_folder / f"{DAG_ID}.py").is_file():
        print(f"demo: {args.dags_folder} has no {DAG_ID}.py; pass --dags-folder", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="sqlqueue-demo-"))
    env = _environment(home, args.queue_connection, args.master, args.dags_folder)
    summary_path = home / "summary.json"
    log_path = home / "dag-test.log"
    started = time.monotonic()
    print(
        f"demo: temporary AIRFLOW_HOME {home} (SQLite), queues in {home / 'queues.db'}, Spark {args.master}"
    )
    print("demo: [1/2] migrating Airflow's metadata database ...", flush=True)
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True
    )
    (home / "db-migrate.log").write_text(migrate.stdout + migrate.stderr, encoding="utf-8")
    if migrate.returncode:
        print(migrate.stdout[-3000:] + migrate.stderr[-3000:], file=sys.stderr)
        return migrate.returncode
    print(f"demo: [2/2] running DAG {DAG_ID} with dag.test() ({time.monotonic() - started:.0f} s so far)")
    run_conf = json.dumps(
        {"orders": args.orders, "max_messages": args.max_messages, "summary_path": str(summary_path)}
    )
    state = last = None
    with (
        open(log_path, "w", encoding="utf-8") as log,
        subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_sqlqueue.pipeline_demo", "--child", run_conf],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        ) as child,
    ):
        assert child.stdout is not None
        for line in child.stdout:
            log.write(line)
            if line.startswith("DAGRUN_STATE="):
                state = line.strip().split("=", 1)[1]
                continue
            shown = _progress(line)
            if shown and shown != last:
                print(f"  {time.monotonic() - started:6.1f}s  {shown}", flush=True)
            last = shown or last
        returncode = child.wait()
    print(f"demo: DAG run {state or 'did not finish'} in {time.monotonic() - started:.0f} s; log: {log_path}")
    if returncode or state != "success" or not summary_path.exists():
        print("demo: the pipeline failed; the end of its log:", file=sys.stderr)
        print("".join(log_path.read_text(encoding="utf-8").splitlines(True)[-60:]), file=sys.stderr)
        return returncode or 1
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    print("\npipeline summary")
    width = max(len(key) for key in summary)
    for key, value in summary.items():
        if key == "top_customers":
            continue
        print(f"  {key.replace('_', ' '):<{width}}  {value}")
    print("  top customers by amount")
    for row in summary.get("top_customers", []):
        print(f"    {row['customer']}  {row['currency']}  {row['orders']:>5} orders  {row['amount']:>12,.2f}")
    if not args.keep:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if summary.get("every_order_accounted_for") else 1


if __name__ == "__main__":
    sys.exit(main())
