"""RequestReplyOperator: call a service through a queue and return its answer, waiting in the triggerer.

The task sends a request (a command to a .NET or Python endpoint) whose ``NServiceBus.ReplyToAddress`` is
a reply queue of its own (transport/reply_queue.py), defers to :class:`~..triggers.reply.ReplyTrigger`,
which holds no worker slot while it waits, and resumes on the worker to take the reply.

Retries are safe: the request's id comes from the task instance (DAG id, task id, run id, map index), and
the request goes out in one transaction with a marker into its reply queue, so a retry (after a worker
died, or a timeout) finds the marker, sends nothing and waits for the same reply again.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator

from ..hooks.sqlqueue import SqlQueueHook
from ..transport import headers as h
from ..transport.browse import BrowsedMessage
from ..transport.reply_queue import ReplyQueue
from ..triggers.reply import ReplyTrigger
from ._rendered import as_mapping
from .send import task_message_id, to_message

DEFAULT_REPLY_QUEUE_PREFIX = "airflow.replies"
DEFAULT_FAILURE_HEADER = f"{h.EXCEPTION_INFO_PREFIX}Message"


def _seconds(value: timedelta | float | int) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(f"reply_timeout must be a positive timedelta or seconds, not {value!r}")
    return float(seconds)


class RequestReplyOperator(BaseOperator):
    """Send ``body`` to ``destination`` as a request and return the reply's body.

    :param destination: the service's queue address (templated).
    :param body: bytes, text, or a JSON-able value sent as JSON (templated).
    :param headers: request headers (templated), e.g. ``NServiceBus.EnclosedMessageTypes`` for .NET.
    :param reply_queue_prefix: the request's reply queue is ``<prefix>.<request id>`` in the prefix's
        schema (default ``airflow.replies``); the task creates and drops it, so the connection needs DDL
        rights there.
    :param reply_timeout: how long one try waits (timedelta or seconds, default 1 hour). A try that times
        out fails; its retry waits for the same reply without sending again; the last try gives up and
        moves what reached the reply queue to ``error_queue`` with the reason.
    :param poll_interval: seconds between the trigger's reads of the reply queue.
    :param failure_header: a reply carrying this header fails the task with its value (default
        ``NServiceBus.ExceptionInfo.Message``); None to accept every reply.
    :param max_reply_bytes: a reply body up to this size is returned as the XCom; a larger one is left in
        its reply queue and a reference to it returned instead (``reply_queue`` and ``reply_id``).
    :param error_queue: where the replies nobody waits for any more go (default ``error``).
    :return: ``{"body", "reply_id", "correlation_id", "content_type", "enclosed_message_types"}``: the body
        parsed when its content type is JSON, else text (base64 with ``body_encoding`` when not UTF-8).
    """

    template_fields: Sequence[str] = ("destination", "body", "headers")
    template_fields_renderers = {"body": "json", "headers": "json"}
    ui_color = "#e3e0f7"

    def __init__(
        self,
        *,
        destination: str,
        body: Any,
        headers: Mapping[str, str | None] | None = None,
        reply_queue_prefix: str = DEFAULT_REPLY_QUEUE_PREFIX,
        reply_timeout: timedelta | float = timedelta(hours=1),
        poll_interval: float = 5.0,
        failure_header: str | None = DEFAULT_FAILURE_HEADER,
        max_reply_bytes: int = 48 * 1024,
        error_queue: str = "error",
        sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.destination = destination
        self.body = body
        self.headers = headers
        self.reply_queue_prefix = reply_queue_prefix
        self.reply_timeout = _seconds(reply_timeout)
        if isinstance(poll_interval, bool) or not poll_interval > 0:
            raise ValueError(f"poll_interval must be positive, not {poll_interval!r}")
        self.poll_interval = float(poll_interval)
        self.failure_header = failure_header
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int) or max_reply_bytes < 0:
            raise ValueError(f"max_reply_bytes must be an int >= 0, not {max_reply_bytes!r}")
        self.max_reply_bytes = max_reply_bytes
        self.error_queue = error_queue
        self.sqlqueue_conn_id = sqlqueue_conn_id

    def request_id(self, context: Any) -> uuid.UUID:
        """The request's id: the same on every try of the task instance."""
        ti = context["ti"]
        return task_message_id(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1), 0)

    def _replies(self, hook: SqlQueueHook, request_id: uuid.UUID) -> ReplyQueue:
        return ReplyQueue(hook.get_transport(), self.reply_queue_prefix, request_id)

    def send_request(self, context: Any) -> uuid.UUID:
        """Send the request unless an earlier try did; return its id."""
        request_id = self.request_id(context)
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            replies = self._replies(hook, request_id)
            message = to_message(self.body, as_mapping("headers", self.headers), None, request_id)
            if replies.send_request(self.destination, message):
                self.log.info(
                    "sent request %s to %s, replies to %s", request_id, self.destination, replies.address
                )
            else:
                self.log.info("request %s was sent by an earlier try; waiting for its reply", request_id)
        finally:
            hook.close()
        return request_id

    def execute(self, context: Any) -> None:
        request_id = self.send_request(context)
        deadline = datetime.now(timezone.utc) + timedelta(seconds=self.reply_timeout)
        self.defer(
            trigger=ReplyTrigger(
                reply_queue_prefix=self.reply_queue_prefix,
                request_id=str(request_id),
                deadline=deadline.isoformat(),
                sqlqueue_conn_id=self.sqlqueue_conn_id,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
        )

    def _last_try(self, context: Any) -> bool:
        try_number = getattr(context.get("ti"), "try_number", None)
        return not isinstance(try_number, int) or try_number > (self.retries or 0)

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Check the trigger's event, take the reply from its queue and return its body."""
        request_id = self.request_id(context)
        if not isinstance(event, dict) or event.get("request_id") != str(request_id):
            raise AirflowException(f"RequestReplyOperator: unexpected trigger event {event!r}")
        status = event.get("status")
        hook = SqlQueueHook(sqlqueue_conn_id=self.sqlqueue_conn_id)
        try:
            replies = self._replies(hook, request_id)
            if status == "timeout":
                self._timed_out(replies, context)
            if status != "success":
                raise AirflowException(
                    f"waiting for the reply to request {request_id} failed: {event.get('message', event)}"
                )
            reply = replies.find_reply()
            if reply is None or reply.id != event.get("reply_id"):
                raise AirflowException(
                    f"the reply {event.get('reply_id')} to request {request_id} is no longer in "
                    f"{replies.address}"
                )
            return self._result(replies, reply)
        finally:
            hook.close()

    def _timed_out(self, replies: ReplyQueue, context: Any) -> None:
        waited = (
            f"no reply to request {replies.request_id} reached {replies.address} in {self.reply_timeout:g} s"
        )
        if not self._last_try(context):
            raise AirflowException(f"{waited}; the retry waits for the same reply without sending again")
        moved = replies.close(
            f"no request waits for this reply any more: request {replies.request_id} gave up after "
            f"{self.reply_timeout:g} s on its last try",
            error_queue=self.error_queue,
        )
        raise AirflowException(
            f"{waited} on the last try; the reply queue was dropped ({moved} message(s) in it moved to "
            f"{self.error_queue}), and a reply sent later fails at its sender"
        )

    def _result(self, replies: ReplyQueue, reply: BrowsedMessage) -> dict[str, Any]:
        failure = None if self.failure_header is None else reply.headers.get(self.failure_header)
        content_type = reply.headers.get(h.CONTENT_TYPE)
        result: dict[str, Any] = {
            "reply_id": reply.id,
            "correlation_id": reply.headers.get(h.CORRELATION_ID),
            "content_type": content_type,
            "enclosed_message_types": reply.headers.get(h.ENCLOSED_MESSAGE_TYPES),
        }
        if len(reply.body) > self.max_reply_bytes and failure is None:
            self.log.info("reply %s has %d bytes: left in %s", reply.id, len(reply.body), replies.address)
            return {**result, "reply_queue": str(replies.address), "body_bytes": len(reply.body)}
        if failure is None:
            result.update(self._body(reply.body, content_type))  # before the close: a bad body loses nothing
        replies.close(
            f"request {replies.request_id} was already answered by {reply.id}",
            answered_by=reply.id,
            error_queue=self.error_queue,
        )
        if failure is not None:
            raise AirflowException(
                f"the reply to request {replies.request_id} reports a failure: {failure} (a retry sends the "
                "request again, with the same id)"
            )
        return result

    @staticmethod
    def _body(body: bytes, content_type: str | None) -> dict[str, Any]:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}
        if content_type and content_type.split(";")[0].strip().lower() == "application/json":
            try:
                return {"body": json.loads(text)}
            except ValueError as error:
                raise AirflowException(f"the reply says it is JSON but is not: {error}") from error
        return {"body": text}
