"""The event trigger's watermark survives a triggerer restart (a real Airflow: scheduler, triggerer, API).

Two assets watch an ``orders`` queue each, one on SQLite and one on PostgreSQL, through
``QueueMessagesEventTrigger``; their DAGs do not consume, so the messages stay in the queues. A first batch
fires one asset event per queue. The triggerer is then stopped and started again: with the watermark kept
only in memory, the restarted trigger saw the waiting messages as new and fired a second event. It must
fire again only for the second batch.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EngineTarget
from postgres_plugin import PostgresServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "browser"))
from airflow_stack import AirflowStack, kill_leftovers, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(600)]

POLL_INTERVAL = 1.0
QUIET_POLLS = 10  # how long "no further event" is watched for, in polls

DAG_FILE = '''
from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_sqlqueue.triggers.queue import QueueMessagesEventTrigger

for engine in ("sqlite", "postgresql"):
    orders = Asset(
        f"sqlqueue_orders_{engine}",
        watchers=[
            AssetWatcher(
                name=f"orders_{engine}",
                trigger=QueueMessagesEventTrigger(
                    queue_name="orders", sqlqueue_conn_id=f"sqlqueue_{engine}", poll_interval=POLL_INTERVAL
                ),
            )
        ],
    )
    with DAG(
        dag_id=f"orders_arrived_{engine}",
        schedule=[orders],
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
    ):

        @task
        def look() -> None:
            """Leaves the messages where they are, like a consumer that has not caught up yet."""

        look()
'''


def events_of(stack: AirflowStack, asset_name: str) -> list[dict[str, Any]]:
    assets = stack.api("GET", f"/api/v2/assets?name_pattern={asset_name}")["assets"]
    [asset] = [a for a in assets if a["name"] == asset_name]
    return stack.api("GET", f"/api/v2/assets/events?asset_id={asset['id']}&limit=100")["asset_events"]


def test_a_restarted_triggerer_fires_once_per_new_batch_and_never_twice(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    import uuid

    import airflow
    from packaging.version import Version

    durable = Version(airflow.__version__) >= Version("3.3")  # the triggerer hands out asset state stores
    fired_again = 0 if durable else 1

    schema = f"t_{uuid.uuid4().hex[:12]}"
    postgres_server.execute(f'CREATE SCHEMA "{schema}"')
    targets = {
        "sqlite": EngineTarget("sqlite", f"sqlite:///{tmp_path / 'queues.db'}", None),
        "postgresql": EngineTarget("postgresql", postgres_server.base_url, schema),
    }
    for target in targets.values():
        with target.open() as transport:
            transport.queue("orders").create()

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "orders_arrived.py").write_text(
        textwrap.dedent(DAG_FILE).replace("POLL_INTERVAL", repr(POLL_INTERVAL))
    )
    home = tmp_path / "airflow-home"
    home.mkdir()
    stack = AirflowStack(home, dags_folder=dags)
    for engine, target in targets.items():
        stack.env[f"AIRFLOW_CONN_SQLQUEUE_{engine.upper()}"] = json.dumps(target.airflow_connection())

    def send(count: int) -> None:
        for target in targets.values():
            with target.open() as transport:
                transport.queue("orders").send_batch([f"order {n}".encode() for n in range(count)])

    def all_have(count: int) -> bool:
        return all(len(events_of(stack, f"sqlqueue_orders_{e}")) >= count for e in targets)

    def triggers_started(count: int) -> bool:
        log = (home / "triggerer.log").read_text(errors="replace")
        return len(re.findall(r"trigger ID \d+ starting", log)) >= count

    try:
        stack.migrate()
        stack.start()
        stack.wait_until_ready(timeout=180)
        for engine in targets:
            wait_for(
                f"DAG orders_arrived_{engine} to be parsed",
                lambda e=engine: stack.api("GET", f"/api/v2/dags/orders_arrived_{e}"),
                120,
            )
            stack.api("PATCH", f"/api/v2/dags/orders_arrived_{engine}", {"is_paused": False})
        wait_for("both event triggers to start", lambda: triggers_started(2), 120)

        send(3)
        wait_for("one asset event per queue for the first batch", lambda: all_have(1), 120)

        stack.restart("triggerer")
        wait_for("the restarted triggerer to run both triggers", lambda: triggers_started(4), 180)
        time.sleep(QUIET_POLLS * POLL_INTERVAL)
        stack.check_alive()
        after_restart = {e: events_of(stack, f"sqlqueue_orders_{e}") for e in targets}
        expected = 1 + fired_again
        counts = {e: len(v) for e, v in after_restart.items()}
        assert counts == {"sqlite": expected, "postgresql": expected}, (
            f"the restarted triggerer fired {'again' if durable else 'other than once more'} for messages it "
            "had already reported:\n" + stack.log_tail("triggerer", 60)
        )

        send(2)
        wait_for("one asset event per queue for the second batch", lambda: all_have(expected + 1), 120)
        time.sleep(QUIET_POLLS * POLL_INTERVAL)
        final = {e: events_of(stack, f"sqlqueue_orders_{e}") for e in targets}
        assert {e: len(v) for e, v in final.items()} == {"sqlite": expected + 1, "postgresql": expected + 1}
        for engine, events in final.items():
            depths = sorted(event["extra"]["payload"]["depth"] for event in events)
            assert depths == [3] * expected + [5], (engine, events)
        log = (home / "triggerer.log").read_text(errors="replace")
        assert ("in memory: no asset state store" in log) is not durable
    finally:
        stack.stop()
        kill_leftovers(home)
        postgres_server.execute(f'DROP SCHEMA "{schema}" CASCADE')
