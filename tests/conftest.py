"""The real-engine test bed: SQLite files, a throwaway PostgreSQL cluster, and SQL Server when one is named.

- PostgreSQL: a private cluster started once per test session from Debian's server binaries (or the server
  in ``SQLQUEUE_TEST_POSTGRES_DSN``). Each test gets its own schema, dropped afterwards.
- SQLite: a fresh file per test.
- SQL Server: the server named by ``SQLQUEUE_TEST_MSSQL_HOST``, else the TDS engine (Babelfish for PostgreSQL)
  from ``../shared/tds-engine`` started for the session (see ``sqlserver_bed.py``); each test runs once per
  ODBC driver (FreeTDS, Microsoft's ODBC Driver 18) in a schema of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy.engine import make_url
from sqlserver_bed import DRIVER_NAMES, SqlServerBed, register_msodbc, start_bed

from airflow_provider_sqlqueue.transport import Transport, open_transport

if TYPE_CHECKING:  # imported by pytest_plugins below; importing it first would skip its assertion rewriting
    from postgres_plugin import PostgresServer

REPO = Path(__file__).resolve().parent.parent
# Airflow reads its home and settings at import: give the whole session a private one, before any test
# module imports Airflow. Subprocesses (dag.test runs) inherit it. Each xdist worker gets its own: the
# workers inherit the controller's environment, and two workers migrating or running DAGs on one SQLite
# metadata database collide ("table connection already exists" when both start with an Airflow test).
AIRFLOW_HOME_PREFIX = "sqlqueue-airflow-home-"
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and Path(os.environ.get("AIRFLOW_HOME", "")).name.startswith(AIRFLOW_HOME_PREFIX):
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix=f"{AIRFLOW_HOME_PREFIX}{_worker}-")
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix=AIRFLOW_HOME_PREFIX))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags_examples"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
# Every JVM a test starts (spark-submit, a PySpark session) lives for seconds on little data, so most of its
# CPU goes to the JIT's optimizing tier and the parallel collector's threads. C1 only and the serial
# collector cut a local spark-submit test's CPU by about 45 % and its time by about 22 % on 2 cores. For the
# tests only: benchmarks/ and the product's runs keep the JVM's defaults. The standalone cluster's daemons
# and executors take the same options (tests/spark_cluster.py).
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def spark_home_without_its_zip() -> str | None:
    """A Spark home for the tests' local Spark runs: the pip-installed PySpark's own folders, linked, except
    ``python/lib/pyspark.zip``. Spark puts that archive first on the path of every Python process it starts
    (workers, the data source's planning processes, a spark-submit driver), and zipimport compiles each
    module anew in each process, about a second of CPU apiece on CI's machine; without it those processes
    import the same PySpark from the venv's site-packages, compiled once. The standalone cluster and the
    applications submitted to it keep the real home (tests/spark_cluster.py, ``spark_submit`` in
    tests/test_spark_jobs.py): their executors and the driver's data source planning run an interpreter
    without PySpark installed. None (Spark's own home) when PySpark is absent or has no such archive."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    real = Path(spec.origin).resolve().parent
    if not (real / "python" / "lib" / "pyspark.zip").is_file():
        return None
    home = Path(tempfile.mkdtemp(prefix="sqlqueue-spark-home-"))
    lib = real / "python" / "lib"
    for folder, skipped in ((real, "python"), (real / "python", "lib"), (lib, "pyspark.zip")):
        target = home / folder.relative_to(real)
        target.mkdir(exist_ok=True)
        for entry in folder.iterdir():
            if entry.name != skipped:
                (target / entry.name).symlink_to(entry)
    return str(home)


if "SPARK_HOME" not in os.environ:
    spark_home = spark_home_without_its_zip()
    if spark_home is not None:
        os.environ["SPARK_HOME"] = spark_home

# Before anything starts a process (Spark, Airflow): Microsoft's ODBC Driver 18 for the SQL Server targets.
register_msodbc()

# The session's PostgreSQL (the `postgres_server` fixture), the check of a run's skips
# (`--expected-skips=FILE`, which .ci/test passes) and pytester, which tests that check.
pytest_plugins = ["postgres_plugin", "expected_skips", "live_suite_counts", "pytester"]
ENGINES = ["sqlite", "postgresql", "sqlserver-freetds", "sqlserver-msodbc"]


@dataclass
class EngineTarget:
    """Where one test's queues live: a URL plus the schema that isolates the test.

    ``engine`` is the database (sqlite, postgresql, sqlserver); ``driver`` is ``odbc`` when the test reaches
    it through pyodbc instead of its native driver.
    """

    engine: str
    url: str
    schema: str | None
    driver: str | None = None
    variant: str | None = None  # "babelfish" when the SQL Server target is Babelfish for PostgreSQL

    @property
    def babelfish(self) -> bool:
        return self.variant == "babelfish"

    def open(self, **options: object) -> Transport:
        return open_transport(self.url, default_schema=self.schema, **options)  # type: ignore[arg-type]

    def airflow_connection(self, **extra: object) -> dict[str, object]:
        """This target as an Airflow connection of type ``sqlqueue`` (for ``AIRFLOW_CONN_<ID>``)."""
        if self.engine == "sqlite":
            return {
                "conn_type": "sqlqueue",
                "host": make_url(self.url).database,
                "extra": {"engine": "sqlite", **extra},
            }
        if self.engine == "postgresql":
            url = make_url(self.url)
            return {
                "conn_type": "sqlqueue",
                "host": url.host,
                "port": url.port,
                "login": url.username,
                "password": url.password,
                "schema": url.database,
                "extra": {"engine": "postgresql", "default_schema": self.schema, **extra},
            }
        return {
            "conn_type": "sqlqueue",
            "extra": {
                "engine": "sqlserver",
                "default_schema": self.schema,
                "odbc_connect": self.url,
                **extra,
            },
        }

    def airflow_env(self, conn_id: str = "sqlqueue_default", **extra: object) -> dict[str, str]:
        env = {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(self.airflow_connection(**extra))}
        if self.engine == "sqlserver":  # the test server's odbc_connect names its ODBC driver
            env["AIRFLOW__PROVIDERS_ODBC__ALLOW_DRIVER_IN_EXTRA"] = "True"
        return env


_ADMIN_SESSIONS: dict[str, Any] = {}


def _mssql_admin(odbc: str, *, fresh: bool = False) -> Any:
    """One autocommit session per connection string for the fixtures' own statements (schemas in and
    out): a login to Babelfish costs 100-200 ms, and every SQL Server test would pay two."""
    import pyodbc

    if fresh or odbc not in _ADMIN_SESSIONS:
        stale = _ADMIN_SESSIONS.pop(odbc, None)
        if stale is not None:
            with contextlib.suppress(pyodbc.Error):
                stale.close()
        _ADMIN_SESSIONS[odbc] = pyodbc.connect(odbc, autocommit=True)
    return _ADMIN_SESSIONS[odbc]


def _mssql_run(odbc: str, sql: str, *params: Any) -> list[Any]:
    """``sql`` on the admin session, logging in again once if the session was lost (a test that stopped
    the server or killed sessions); a statement that failed on a live session is not repeated."""
    import pyodbc

    try:
        cursor = _mssql_admin(odbc).execute(sql, *params)
    except pyodbc.Error as error:
        if not str(error.args[0]).startswith("08"):
            raise
        cursor = _mssql_admin(odbc, fresh=True).execute(sql, *params)
    return cursor.fetchall() if cursor.description else []


def _mssql_execute(odbc: str, sql: str) -> None:
    _mssql_run(odbc, sql)


@pytest.fixture(scope="session")
def sqlserver_bed() -> Iterator[SqlServerBed]:
    """The session's SQL Server (or Babelfish); the SQL Server targets skip, saying why, without one."""
    bed, reason = start_bed()
    if bed is None:
        pytest.skip(reason)
    try:
        bed.version = _server_version(next(iter(bed.drivers.values()), bed.odbc("freetds")))
        yield bed
    finally:
        for odbc in list(_ADMIN_SESSIONS):
            with contextlib.suppress(Exception):
                _ADMIN_SESSIONS.pop(odbc).close()
        bed.stop()


def _server_version(odbc: str) -> str:
    import pyodbc

    with pyodbc.connect(odbc, autocommit=True) as connection:
        babelfish = connection.execute("SELECT CAST(SERVERPROPERTY('BabelfishVersion') AS nvarchar(64))")
        version = babelfish.fetchone()[0]
        if version:
            return str(version)
        product = connection.execute("SELECT CAST(SERVERPROPERTY('ProductVersion') AS nvarchar(64))")
        return str(product.fetchone()[0])


def sqlserver_target(request: pytest.FixtureRequest, driver: str) -> Iterator[EngineTarget]:
    """A schema of its own on the session's SQL Server, reached through ``driver`` (freetds, msodbc)."""
    bed: SqlServerBed = request.getfixturevalue("sqlserver_bed")
    if driver not in bed.drivers:
        pytest.skip(f"SQL Server live suite through {DRIVER_NAMES[driver]}: {bed.missing[driver]}")
    odbc = bed.drivers[driver]
    schema = f"t_{uuid.uuid4().hex[:12]}"
    _mssql_execute(odbc, f"CREATE SCHEMA [{schema}]")
    try:
        yield EngineTarget("sqlserver", odbc, schema, driver, bed.kind if bed.kind == "babelfish" else None)
    finally:
        _drop_mssql_schema(odbc, schema)


def _drop_mssql_schema(odbc: str, schema: str) -> None:
    tables = _mssql_run(
        odbc,
        "SELECT t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ?",
        schema,
    )
    for (table,) in tables:
        _mssql_run(odbc, f"DROP TABLE [{schema}].[{table.replace(']', ']]')}]")
    _mssql_run(odbc, f"DROP SCHEMA [{schema}]")


@pytest.fixture(params=ENGINES)
def target(request: pytest.FixtureRequest, tmp_path) -> Iterator[EngineTarget]:
    """Each behavioural test runs once per engine (SQL Server once per driver), in a namespace of its own.

    Tests may narrow it with ``@pytest.mark.parametrize("target", [...], indirect=True)``; a bare
    ``"sqlserver"`` there means both drivers' runs are wanted as one, through FreeTDS.
    """
    engine, _, driver = str(request.param).partition("-")
    if engine == "sqlite":
        yield EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None)
        return
    if engine == "sqlserver":
        yield from sqlserver_target(request, driver or "freetds")
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    server.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield EngineTarget("postgresql", server.base_url, schema)
    finally:
        server.execute(f'DROP SCHEMA "{schema}" CASCADE')


def odbc_target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[EngineTarget]:
    """PostgreSQL (psqlODBC) or SQLite (SQLite3 ODBC driver) reached through pyodbc and unixODBC."""
    from urllib.parse import quote

    if engine == "sqlite":
        odbc = f"DRIVER={{SQLite3}};Database={tmp_path / 'queues.db'};Timeout=30000"
        yield EngineTarget("sqlite", f"sqlite+pyodbc:///?odbc_connect={quote(odbc)}", None, "odbc")
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = make_url(server.base_url)
    odbc = (
        f"DRIVER={{PostgreSQL Unicode}};SERVER={url.host};PORT={url.port};DATABASE={url.database};"
        f"UID={url.username};PWD={{{url.password}}}"
    )
    schema = f"t_{uuid.uuid4().hex[:12]}"
    server.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield EngineTarget("postgresql", f"postgresql+pyodbc:///?odbc_connect={quote(odbc)}", schema, "odbc")
    finally:
        server.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def transport(target: EngineTarget) -> Iterator[Transport]:
    with target.open() as opened:
        yield opened


@pytest.fixture
def queue(transport: Transport):
    """An ``orders`` queue with its ``error`` queue, both created."""
    transport.queue("error").create()
    orders = transport.queue("orders")
    orders.create()
    return orders


# The extended tier: slow runs that repeat, on another engine or kill point, what a run of the same test
# already proves in every CI run. Each CI run takes one share of them (a seventh, chosen by the commit: see
# `extended_share`), so every one runs at least once in any seven consecutive commits; the rest carry the
# `extended` marker, which CI's steps (.ci/test) deselect. `SQLQUEUE_EXTENDED_SHARE=none bash .ci/test -m
# extended` runs the whole tier. Each rule is (test file, test name, the parameter ids it covers); a rule
# that matches no collected test fails a whole-suite run, so a renamed parameter cannot drop a rule silently.
EXTENDED_SHARES = 7
# The test files whose tests run DAGs through dag.test(), once per engine.
DAG_TEST_FILES = (
    "test_airflow_dags.py",
    "test_airflow_surface_dags.py",
    "test_airflow_own_transaction.py",
    "test_openlineage.py",
    "test_request_reply_airflow.py",
)
EXTENDED_RUN = pytest.StashKey[tuple[int | None, int, int]]()
EXTENDED = (
    (  # one kill point per engine and read mode runs in every CI run (after_sink); the others rotate
        "test_spark_source.py",
        "test_stream_killed_at_each_point_then_restarted_delivers_exactly_once",
        tuple(
            f"{engine}-{point}"
            for engine in ("sqlite-staged", "postgresql-staged", "postgresql-in_place")
            for point in ("after_receive", "mid_batch", "before_commit")
        ),
    ),
    (
        "test_spark_jobs.py",
        "test_spark_submit_driver_killed_mid_job_then_rerun_accounts_exactly",
        ("sqlite-table-processing", "postgresql-json-receiving", "postgresql-queue-receiving"),
    ),
    (
        "test_spark_cluster.py",
        "test_a_worker_killed_mid_drain_loses_and_duplicates_nothing",
        ("staging-postgresql",),
    ),
    (  # the example DAG pair on PostgreSQL: SQLite proves it in CI, the DAGs hold no engine-specific code
        "test_pubsub_surface.py",
        "test_the_example_producer_reaches_both_example_consumer_dags_once_each",
        ("postgresql",),
    ),
    # The data source on the cluster: its stream is killed there in every run
    # (test_a_worker_killed_mid_stream_loses_and_duplicates_nothing) and its batch read is the drain's,
    # which the operator runs there in every run.
    (
        "test_spark_cluster.py",
        "test_the_data_source_reads_in_batch_and_streams_on_the_cluster",
        ("sqlite", "postgresql"),
    ),
    # The dag.test() runs on PostgreSQL: SQLite and SQL Server (through Driver 18; FreeTDS below) run them in
    # every CI run; the DAGs hold no engine-specific code, and each engine's SQL behind the hook is the core
    # suite's.
    *((file, "*", ("postgresql",)) for file in DAG_TEST_FILES),
    (
        "test_spark_cluster.py",
        "test_the_drain_job_runs_on_a_standalone_cluster_with_the_provider_shipped",
        ("sqlite",),
    ),
    # The slow DAG runs on SQL Server through FreeTDS (other files' FreeTDS runs: FREETDS_ABOVE_THE_DRIVER):
    # Microsoft's ODBC Driver 18, SQL Server's own, runs them in every CI run, and the core suite runs every
    # statement and transaction through both drivers in every run; what a DAG run adds above the hook
    # (scheduling, retries, triggers) is not the driver's.
    *(
        (file, "*", ("sqlserver-freetds",))
        for file in (
            "test_airflow_dags.py",
            "test_airflow_surface_dags.py",
            "test_airflow_own_transaction.py",
        )
    ),
    # The SQL Server runs, through Driver 18, of tests whose subject sits above the engine's SQL: Airflow's
    # templating, mapping, retries, deferral and triggers; Spark's retries, checkpoints and sinks; the CLI's
    # arguments and exit codes; the pump's strategies. SQLite runs each of them in every CI run, PostgreSQL
    # where it has one, and the SQL they reach is the core suite's, run through both drivers in every run.
    # SQL Server keeps in every run what its engine decides there: Airflow's own transaction, the
    # exactly-once example, the sensor's estimate, Spark's receives and kills mid-receive, the table sink's
    # kill, staged and orphaned runs, expired and unreadable rows, the CLI's create, peek, receive and
    # inspect, the monitor strategy and the pump's transaction matrix.
    *(
        (file, test, ("sqlserver-msodbc",))
        for file, tests in {
            "test_airflow_surface_dags.py": (
                "test_every_templated_field_takes_an_xcomarg_and_a_jinja_string",
                "test_a_retried_send_repeats_its_message_ids_and_returns_a_summary",
                "test_mapped_and_plain_tasks_run_on_the_default_executor_queue",
                "test_failed_messages_of_one_queue_are_retried_by_the_operator_in_a_dag",
                "test_provisioning_with_defaults_creates_the_same_tables_on_any_worker",
            ),
            "test_airflow_dags.py": (
                "test_maintenance_example_provisions_endpoint_queues_idempotently_and_purges_expired",
                "test_sensor_example_defers_until_more_orders_arrive_then_consumes_all",
                "test_event_driven_example_drains_what_arrived",
            ),
            "test_request_reply_airflow.py": (
                "test_the_example_dag_asks_the_service_and_uses_its_price",
                "test_concurrent_deferred_requests_get_their_own_replies",
                "test_a_reply_before_the_trigger_and_across_a_triggerer_restart_is_found",
            ),
            "test_openlineage.py": ("test_retry_all_reports_every_queue_it_retried_into_through_dag_test",),
            "test_spark_jobs.py": (
                "test_always_failing_transform_aborts_and_every_message_goes_back",
                "test_transform_failing_once_is_retried_and_counted_exactly",
                "test_messages_frame_decodes_text_bodies_only",
                "test_file_sink_rows_carry_message_ids",
                "test_fill_sends_each_batch_once_across_retries_and_reruns",
            ),
            "test_spark_source.py": (
                "test_a_stream_stages_the_next_trigger_while_spark_runs_the_planned_one",
                "test_a_new_checkpoint_refuses_a_batch_an_earlier_query_read_and_never_committed",
                "test_a_query_restarted_from_a_checkpoint_older_than_the_streams_newest_is_refused",
                "test_a_query_that_starts_on_a_stream_id_takes_it_and_the_other_reads_nothing_more",
                "test_a_stream_without_a_read_limit_stages_a_bounded_batch_per_trigger",
                "test_an_empty_queue_reads_as_an_empty_frame_and_an_empty_stream_ends",
            ),
            "test_spark_source_write.py": (
                "test_spark_submit_takes_the_credentials_from_the_environment_only",
                "test_writing_again_with_the_same_run_id_sends_nothing_and_without_one_sends_again",
            ),
            "test_cli.py": (
                "test_time_to_be_received_stats_and_purge",
                "test_receive_writes_json_lines_to_a_file_before_removing",
                "test_send_bodies_from_stdin_files_and_lines",
                "test_drop_asks_and_reports",
                "test_airflow_conn_id_and_environment",
                "test_send_many_with_count_in_batches",
                "test_consume_takes_url_options_and_conn_ids",
                "test_receive_waits_for_a_first_message",
            ),
        }.items()
        for test in tests
    ),
    (  # the kill outside the transform, per sink: the table sink's is SQL Server's in every run
        "test_spark_jobs.py",
        "test_python_worker_killed_mid_transform_is_retried_per_sink_guarantee",
        ("sqlserver-msodbc-queue", "sqlserver-msodbc-parquet"),
    ),
    (
        "test_spark_source_write.py",
        "test_a_task_failing_in_its_first_attempt_is_retried_without_duplicates",
        ("None-sqlserver-msodbc", "1000-sqlserver-msodbc"),
    ),
    (  # a missing queue is refused by the same existence check on every engine; send's stays in every run
        "test_cli.py",
        "test_a_missing_queue_exits_3",
        tuple(
            f"sqlserver-msodbc-{command}"
            for command in (
                "receive",
                "peek",
                "depth",
                "stats",
                "purge-expired",
                "inspect",
                "drop",
                "consume",
            )
        ),
    ),
    (
        "test_pump.py",
        "test_each_strategy_handles_every_message_exactly_once",
        ("sqlserver-msodbc-adaptive", "sqlserver-msodbc-fixed"),
    ),
    # Staged reads are one code path on every engine: SQLite's staged stream is killed after the sink in
    # every run, PostgreSQL's in-place one too.
    (
        "test_spark_source.py",
        "test_stream_killed_at_each_point_then_restarted_delivers_exactly_once",
        ("postgresql-staged-after_sink",),
    ),
    # The example Spark pipeline runs end to end on SQLite (README command 1) in every run.
    ("test_spark_operator.py", "test_pipeline_demo_runs_the_example_dag_end_to_end", ("postgresql",)),
    # The operator drains on the cluster with the provider shipped in every run
    # (test_the_operator_drains_on_the_cluster_through_dag_test): the same job, submitted by Airflow.
    (
        "test_spark_cluster.py",
        "test_the_drain_job_runs_on_a_standalone_cluster_with_the_provider_shipped",
        ("postgresql",),
    ),
    # The fill-then-drain spark-submit runs on PostgreSQL in every run; the fill job writes through the
    # same writer on every engine.
    ("test_spark_jobs.py", "test_spark_submit_fill_then_drain_with_retries", ("sqlite",)),
)


# The FreeTDS runs, slow or not, of the test files whose tests exercise what sits above the driver: a CLI
# command, the pump's batching and strategies, an endpoint, the Queues page, request/reply, Spark jobs and
# reads, kills and competition at scale. Microsoft's ODBC Driver 18 runs every one of them in every CI run,
# and through FreeTDS every run still takes the files where the driver shows: every statement and type
# bound (test_queue, test_hostile_names, test_wire_compat, test_delayed's times, test_failed's headers), the
# transaction guard and the pump's transaction matrix (test_execute_and_send_guard,
# test_pump_transaction_abuse, test_airflow_own_transaction), timeouts (test_bounded_reads), connections,
# pools and session resets. These take about 700 s of a process in a run, a sixth of the SQL Server share.
FREETDS_ABOVE_THE_DRIVER = frozenset(
    {
        "test_archive_restore.py",
        "test_airflow_units.py",
        "test_cli.py",
        "test_competition.py",
        "test_consume.py",
        "test_endpoint.py",
        "test_exactly_once_faults.py",
        "test_failed_archive.py",
        "test_metrics.py",
        "test_openlineage.py",
        "test_pubsub.py",
        "test_pump.py",
        "test_pump_batching.py",
        "test_queues_page.py",
        "test_readme.py",
        "test_reliability.py",
        "test_request_reply.py",
        "test_request_reply_airflow.py",
        "test_spark_jobs.py",
        "test_spark_source.py",
        "test_spark_source_write.py",
        "test_spark_staged_runs.py",
    }
)


def _matches_rule(item: pytest.Item, rule: tuple[str, str, tuple[str, ...]]) -> bool:
    """Whether the test's file, name and parameter id match ``rule``."""
    name, _, params = item.name.partition("[")
    file, test, ids = rule
    return file in ("*", item.path.name) and test in ("*", name) and params.rstrip("]") in ids


def _extended(item: pytest.Item) -> bool:
    """Whether a test is in the extended tier: a test a rule of EXTENDED names (a rule for a whole file,
    ``"*"``, takes only its slow tests), or a FreeTDS run of a file in FREETDS_ABOVE_THE_DRIVER."""
    if item.path.name in FREETDS_ABOVE_THE_DRIVER and "sqlserver-freetds" in item.name:
        return True
    return any(
        _matches_rule(item, rule) and (rule[1] != "*" or item.get_closest_marker("slow") is not None)
        for rule in EXTENDED
    )


def extended_share(root: Path) -> int | None:
    """Which share of the extended tier this run takes: ``SQLQUEUE_EXTENDED_SHARE`` (0-6, or ``none``), else
    the commit's number on its branch (``git rev-list --count HEAD``) modulo 7, so consecutive commits take
    consecutive shares. None when neither is known (no git, a shallow clone): the whole tier is left out."""
    chosen = os.environ.get("SQLQUEUE_EXTENDED_SHARE", "").strip()
    if chosen:
        if chosen == "none":
            return None
        if not chosen.isdigit() or int(chosen) >= EXTENDED_SHARES:
            raise pytest.UsageError(
                f"SQLQUEUE_EXTENDED_SHARE must be 0-{EXTENDED_SHARES - 1} or none: {chosen!r}"
            )
        return int(chosen)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    try:
        shallow, count = git("rev-parse", "--is-shallow-repository"), git("rev-list", "--count", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return None
    if shallow.strip() != "false":
        return None
    return int(count.strip()) % EXTENDED_SHARES


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run collected every test file (no path narrowed it), so every rule must match."""
    return all(Path(arg).resolve() == Path(config.rootpath, "tests").resolve() for arg in config.args)


def pytest_configure(config: pytest.Config) -> None:
    """Under CI the golden files are only compared: ``SQLQUEUE_UPDATE_GOLDEN=1`` would turn every golden test
    into a writer that passes (tests/test_sqlserver_golden.py)."""
    if os.environ.get("SQLQUEUE_UPDATE_GOLDEN") == "1" and os.environ.get("CI", "").lower() not in (
        "",
        "0",
        "false",
    ):
        raise pytest.UsageError(
            "SQLQUEUE_UPDATE_GOLDEN=1 rewrites the golden files instead of checking them; CI refuses it. "
            "Rewrite them on a workstation, review the diff and commit it."
        )


# The modules that take longest in a whole-suite run or in the oldest Airflow's step (.ci/airflow-oldest):
# a single test of minutes, or many minutes of one process on CI's 2-core machine. Under .ci/test,
# pytest-xdist's loadfile scheduling deals modules to its processes in collection order
# (--no-loadscope-reorder; by default it deals the modules with the most tests first, however long they
# take), so these go first: a long module dealt last would keep one process busy after the other finished.
HEAVY_MODULES_FIRST = (
    "test_triggerer_many_sensors.py",
    "test_spark_source.py",
    "test_spark_jobs.py",
    "test_airflow_surface_dags.py",
    "test_spark_source_write.py",
    "test_airflow_dags.py",
    "test_spark_cluster.py",
    "test_spark_operator.py",
    "test_event_trigger_restart.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the extended tier before ``-m`` and ``-k`` deselect, so every selection sees the same shares:
    the tier's tests sorted by id and dealt round-robin into seven shares of about equal size. Then puts
    the heavy modules first (HEAVY_MODULES_FIRST), every other test after them in its collected order."""
    tier = sorted((item for item in items if _extended(item)), key=lambda item: item.nodeid)
    if _whole_suite(config):
        unmatched = [rule[:2] for rule in EXTENDED if not any(_matches_rule(item, rule) for item in tier)]
        unmatched += [
            (file, "sqlserver-freetds")
            for file in sorted(FREETDS_ABOVE_THE_DRIVER)
            if not any(item.path.name == file for item in tier)
        ]
        if unmatched:
            raise pytest.UsageError(f"tests/conftest.py EXTENDED rules match no test: {unmatched}")
    share = extended_share(config.rootpath)
    config.stash[EXTENDED_RUN] = (share, 0, len(tier))
    taken = 0
    for index, item in enumerate(tier):
        if share is not None and index % EXTENDED_SHARES == share:
            taken += 1
            continue
        item.add_marker(pytest.mark.extended)
    config.stash[EXTENDED_RUN] = (share, taken, len(tier))
    rank = {name: index for index, name in enumerate(HEAVY_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_report_header(config: pytest.Config) -> str:
    """The extended tier's share, in the header: under pytest-xdist the controller collects nothing, so the
    summary's count of the share's tests is the workers' and only this line reaches the log."""
    share = extended_share(config.rootpath)
    which = "none (SQLQUEUE_EXTENDED_SHARE=none, or no full git history)" if share is None else f"{share}"
    return f"extended tier: this run takes share {which} of {EXTENDED_SHARES} (tests/conftest.py)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Which share of the extended tier this run took (tests/live_suite_counts.py counts the SQL Server
    runs per driver)."""
    share, taken, tier = terminalreporter.config.stash.get(EXTENDED_RUN, (None, 0, 0))
    if tier:
        which = "none (SQLQUEUE_EXTENDED_SHARE=none, or no full git history)" if share is None else f"{share}"
        terminalreporter.write_line(
            f"extended tier: share {which} of {EXTENDED_SHARES}: {taken} of its {tier} tests are in this "
            "run's selection; the rest carry the extended marker"
        )
