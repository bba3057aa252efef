"""README command 1: run the showcase DAG (``sqlqueue_spark_pipeline``) end to end with ``dag.test()``.

``python -m airflow_provider_sqlqueue.demo.pipeline [--orders N] [--max-messages N] [--keep]``
makes a temporary AIRFLOW_HOME on SQLite, points ``sqlqueue_default`` at a new SQLite queue file (or keeps the
connection ``AIRFLOW_CONN_SQLQUEUE_DEFAULT`` already names, e.g. a PostgreSQL connection as JSON: an
environment variable, since a password has no place on a command line) and ``spark_default`` at ``local[2]``,
migrates Airflow's database, runs the DAG through ``dag.test()`` in a child process, shows its progress and
ends with the pipeline's summary. The child's full output is kept in ``<home>/dag-test.log``.

While the sensor waits, an order feed in a thread of this process stands in for another system and sends
``--feed-share`` of the orders in four waves. It reaches the queue through ``sqlqueue_default`` as the
DAG does, so no credential goes to another process, and it ends with this process.
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
import threading
import time
from collections.abc import Callable
from pathlib import Path

DAG_ID = "sqlqueue_spark_pipeline"
QUEUE = "orders"
QUEUE_CONNECTION_ENV = "AIRFLOW_CONN_SQLQUEUE_DEFAULT"
SENSOR_TASK = "wait_for_orders"
FEED_WAVES = 4
REPO = Path(__file__).resolve().parents[2]
PROGRESS = [
    (re.compile(r"\[DAG TEST\] starting task_id=(\S+)"), "task {0}"),
    (re.compile(r"(sent \d+ orders; \d+ more are expected from the order feed)"), "  {0}"),
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


class OrderFeed:
    """The demo's other system: once the sensor has deferred, send ``count`` orders in waves from a thread.

    ``on_failure`` is called with the error if a send fails, so the DAG run does not wait out its sensor.
    """

    def __init__(self, count: int, first_order_id: int, on_failure: Callable[[BaseException], None]) -> None:
        self.count = count
        self.first_order_id = first_order_id
        self.on_failure = on_failure
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="order-feed", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from ..hooks.sqlqueue import SqlQueueHook
        from .orders import feed

        hook = SqlQueueHook()
        try:
            self.sent = feed(
                hook.get_queue(QUEUE),
                self.count,
                waves=FEED_WAVES,
                first_order_id=self.first_order_id,
                stop=self._stop,
            )
        except BaseException as error:
            self.error = error
            self.on_failure(error)
        finally:
            hook.close()

    def stop(self) -> None:
        self._stop.set()
        if self.started:
            self._thread.join()


def _child(run_conf: str) -> int:
    """Inside the prepared environment: load the DAG from the dags folder and run dag.test()."""
    from airflow.configuration import conf

    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0 and 3.1
        from airflow.models.dagbag import DagBag

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


def _environment(home: Path, master: str, dags_folder: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    queue_connection = env.get(QUEUE_CONNECTION_ENV)
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
    parser.add_argument(
        "--feed-share", type=float, default=0.4, help="share of the orders the feed sends (default 0.4)"
    )
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
    if not 0 <= args.feed_share <= 0.9:
        print("demo: --feed-share must be between 0 and 0.9", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="sqlqueue-demo-"))
    env = _environment(home, args.master, args.dags_folder)
    os.environ.update(env)  # the order feed reaches sqlqueue_default through this process's Airflow
    summary_path = home / "summary.json"
    log_path = home / "dag-test.log"
    started = time.monotonic()
    print(
        f"demo: temporary AIRFLOW_HOME {home} (SQLite), queues in "
        + (
            f"the {QUEUE_CONNECTION_ENV} connection"
            if os.environ.get(QUEUE_CONNECTION_ENV)
            else str(home / "queues.db")
        )
        + f", Spark {args.master}"
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
        {
            "orders": args.orders,
            "feed_share": args.feed_share,
            "max_messages": args.max_messages,
            "summary_path": str(summary_path),
        }
    )
    from_feed = int(args.orders * args.feed_share)  # as the DAG's send_orders computes it
    state = last = task = None
    with (
        open(log_path, "w", encoding="utf-8") as log,
        subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_sqlqueue.demo.pipeline", "--child", run_conf],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        ) as child,
    ):
        assert child.stdout is not None
        order_feed = OrderFeed(from_feed, args.orders - from_feed + 1, lambda error: child.terminate())
        try:
            for line in child.stdout:
                log.write(line)
                if line.startswith("DAGRUN_STATE="):
                    state = line.strip().split("=", 1)[1]
                    continue
                if started_task := re.search(r"\[DAG TEST\] starting task_id=(\S+)", line):
                    task = started_task.group(1)
                shown = _progress(line)
                if shown and shown != last:
                    print(f"  {time.monotonic() - started:6.1f}s  {shown}", flush=True)
                last = shown or last
                deferred = task == SENSOR_TASK and "[DAG TEST] running trigger in line" in line
                if deferred and from_feed and not order_feed.started:
                    print(
                        f"  {time.monotonic() - started:6.1f}s    order feed: sending {from_feed} orders in "
                        f"{FEED_WAVES} waves, one second apart, while the sensor waits",
                        flush=True,
                    )
                    order_feed.start()
            returncode = child.wait()
        finally:
            order_feed.stop()
    if order_feed.error is not None:
        print(f"demo: the order feed failed: {order_feed.error!r}", file=sys.stderr)
        return 1
    if order_feed.started:
        print(f"demo: the order feed sent {order_feed.sent} orders")
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
