"""PublishMessageOperator: publish one templated event to every queue subscribed to its topic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ._rendered import as_list, as_mapping
from .send import task_message_id, to_message


def as_topics(value: Any) -> list[str]:
    """``base_topics`` as ``execute`` sees it: a list of topics, or text rendered from one."""
    if value is None or value == "":
        return []
    topics = as_list("base_topics", value)
    if not all(isinstance(topic, str) and topic.strip() for topic in topics):
        raise ValueError(f"base_topics must be topics (non-empty strings), not {topics!r}")
    return topics


class PublishMessageOperator(BaseOperator):
    """Publish ``body`` on ``topic``: one copy to each distinct queue subscribed to the topic or to one of
    ``base_topics``, all in one transaction; return the number of queues and the message's Id.

    The producer names no consumer: a DAG or an endpoint that wants the events subscribes its own queue
    (``SqlQueueHook.subscribe``, ``Endpoint(subscribe_to=...)``, ``sqlqueue subscribe``). With no subscriber
    nothing is sent, the task logs it and succeeds.

    :param topic: the event's topic, e.g. ``Sales.Events.OrderPlaced`` (a .NET type's ``FullName`` for
        .NET subscribers) (templated).
    :param body: bytes, text, or a JSON-able value sent as JSON (templated).
    :param headers: message headers (templated); ``NServiceBus.MessageIntent`` is ``Publish`` and
        ``NServiceBus.EnclosedMessageTypes`` the topics unless given.
    :param base_topics: the topic's ancestors, most specific first: their subscribers get the event too
        (templated).
    :param time_to_be_received: a timedelta or seconds; every copy expires that long after publishing.
    :param deterministic_ids: derive the message's Id from the DAG id, task id, run id and map index, so a
        retry of the task publishes the same Id and a subscriber can drop the duplicate; False: random.
    :return: ``{"topic", "queues", "message_id"}``: ``queues`` is how many subscriber queues got a copy.
    """

    template_fields: Sequence[str] = ("topic", "body", "headers", "base_topics")
    template_fields_renderers = {"body": "json", "headers": "json"}
    ui_color = "#d3eaf5"

    def __init__(
        self,
        *,
        topic: str,
        body: Any,
        headers: Mapping[str, str | None] | None = None,
        base_topics: Sequence[str] | None = None,
        time_to_be_received: timedelta | float | None = None,
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        deterministic_ids: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.body = body
        self.headers = headers
        self.base_topics = base_topics
        self.time_to_be_received = time_to_be_received
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.deterministic_ids = deterministic_ids
        self.published_to: list[str] = []

    def execute(self, context: Any) -> dict[str, Any]:
        if not isinstance(self.topic, str) or not self.topic.strip():
            raise ValueError(f"topic must be a non-empty string, not {self.topic!r}")
        ti = context.get("ti") if isinstance(context, Mapping) else None
        message_id = None
        if self.deterministic_ids and ti is not None:
            message_id = task_message_id(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1), 0)
        message = to_message(
            self.body, as_mapping("headers", self.headers), self.time_to_be_received, message_id
        )
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            result = hook.publish(self.topic, message, base_topics=as_topics(self.base_topics))
        finally:
            hook.close()
        self.published_to = list(result.queues)
        if result.queues:
            self.log.info(
                "published %s on %s to %d queue(s): %s",
                result.message_id,
                self.topic,
                len(result.queues),
                ", ".join(result.queues),
            )
        else:
            self.log.info("published %s on %s: no subscriber, nothing sent", result.message_id, self.topic)
        return {"topic": self.topic, "queues": len(result.queues), "message_id": str(result.message_id)}

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: each subscriber queue the event was written to, as an output dataset."""
        from ._lineage import operator_lineage

        return operator_lineage(self.sqlqueue_conn_id, outputs=self.published_to)
