"""``queue`` is Airflow's worker queue in every task of this package, plain or mapped, once serialized.

The message queue is ``queue_name``. A mapped task built with ``.partial(...)`` takes ``queue`` straight
into its partial kwargs, so a message queue passed as ``queue=`` would route the task to a worker queue no
worker listens on. Each class is built plain and mapped, its DAG serialized and read back as the scheduler
does, and the executor queue checked; the mapped send then runs through ``dag.test()`` on real engines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed")

from airflow.sdk import DAG
from airflow.sdk.definitions._internal.abstractoperator import DEFAULT_QUEUE
from airflow.serialization.serialized_objects import DagSerialization

from airflow_provider_sqlqueue.operators.consume import ConsumeMessagesOperator
from airflow_provider_sqlqueue.operators.send import SendMessageOperator
from airflow_provider_sqlqueue.operators.spark_submit import (
    ProvisionSparkBridgeOperator,
    SqlQueueSparkSubmitOperator,
)
from airflow_provider_sqlqueue.sensors.queue import QueueSensor

HANDLER = "airflow_provider_sqlqueue.handlers:log_message"

# class, the keywords that name its message queue, and one keyword to map over
CLASSES: list[tuple[type, dict[str, Any], str, list[Any]]] = [
    (SendMessageOperator, {"queue_name": "orders"}, "body", ["a", "b"]),
    (QueueSensor, {"queue_name": "orders"}, "min_messages", [1, 2]),
    (ConsumeMessagesOperator, {"queue_name": "orders", "handler": HANDLER}, "max_messages", [1, 2]),
    (ProvisionSparkBridgeOperator, {"queue_name": "orders"}, "prefix", ["a", "b"]),
    (SqlQueueSparkSubmitOperator, {"input_queue": "orders", "sink": "table:t"}, "max_messages", [1, 2]),
]
IDS = [cls.__name__ for cls, *_ in CLASSES]


def _serialized_round_trip(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


@pytest.mark.parametrize(("cls", "names", "mapped_key", "values"), CLASSES, ids=IDS)
def test_plain_and_mapped_tasks_keep_the_default_executor_queue(
    cls: type, names: dict[str, Any], mapped_key: str, values: list[Any]
) -> None:
    plain_kwargs = {**names, mapped_key: values[0]}
    with DAG(f"q_{cls.__name__}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        plain = cls(task_id="plain", **plain_kwargs)
        cls.partial(task_id="mapped", **names).expand(**{mapped_key: values})
        routed = cls(task_id="routed", queue="celery-high", **plain_kwargs)
        cls.partial(task_id="routed_mapped", queue="celery-high", **names).expand(**{mapped_key: values})

    assert plain.queue == DEFAULT_QUEUE and routed.queue == "celery-high"
    loaded = _serialized_round_trip(dag)
    assert loaded.get_task("plain").queue == DEFAULT_QUEUE
    assert loaded.get_task("mapped").partial_kwargs.get("queue", DEFAULT_QUEUE) == DEFAULT_QUEUE
    assert loaded.get_task("routed").queue == "celery-high"
    assert loaded.get_task("routed_mapped").partial_kwargs["queue"] == "celery-high"
    if "queue_name" in names:
        assert plain.queue_name == "orders" and routed.queue_name == "orders"
        assert loaded.get_task("mapped").partial_kwargs["queue_name"] == "orders"


@pytest.mark.parametrize(("cls", "names", "mapped_key", "values"), CLASSES, ids=IDS)
def test_a_message_queue_given_as_queue_is_not_taken_for_one(
    cls: type, names: dict[str, Any], mapped_key: str, values: list[Any]
) -> None:
    """``queue=`` alone is Airflow's worker queue: the required message queue is then missing."""
    without_name = {key: value for key, value in names.items() if key not in ("queue_name", "input_queue")}
    with pytest.raises(TypeError, match=r"queue_name|input_queue"):
        cls(task_id="t", queue="orders", **without_name, **{mapped_key: values[0]})
