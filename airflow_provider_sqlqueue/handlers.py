"""Ready-made message handlers for the pump, ``ConsumeMessagesOperator`` and ``sqlqueue consume``.

They need no code of your own, so a first DAG or a shell session can move messages before the real handler
exists: name one as ``handler="airflow_provider_sqlqueue.handlers:log_message"``.
"""

from __future__ import annotations

import logging

from .transport.message import ReceivedMessage

__all__ = ["log_message"]

log = logging.getLogger(__name__)

PREVIEW_BYTES = 200


def log_message(message: ReceivedMessage) -> None:
    """Log the message's id, type header and the start of its body (undecodable bytes shown escaped)."""
    body = message.body[:PREVIEW_BYTES].decode("utf-8", errors="backslashreplace")
    more = f" (+{len(message.body) - PREVIEW_BYTES} bytes)" if len(message.body) > PREVIEW_BYTES else ""
    kind = message.headers.get("NServiceBus.EnclosedMessageTypes", "-")
    log.info("message %s type %s body %s%s", message.id, kind, body, more)
