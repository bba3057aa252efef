"""DataFrame rows as outgoing messages: the one mapping the fill job and the ``sqlqueue`` data source share.

Row -> message: a ``body`` column (binary or string) is the body, else the whole row as JSON
(``application/json``); optional columns ``headers`` (map of strings), ``message_id`` (a UUID string) and
``time_to_be_received_seconds``. Every message carries ``SqlQueue.Spark.RunId``. Without a ``message_id``
the Id is derived from (run id, partition, position), so that the same row gets the same Id in every
attempt of a task and consumers can deduplicate even across run ids they re-use. A ``message_id`` that is
not a UUID is an error rather than silently replaced: a consumer deduplicating on it would be misled.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..transport import ConfigurationError, OutgoingMessage
from ..transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES
from .tables import _jsonable

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ID_NAMESPACE",
    "RUN_ID_HEADER",
    "SPECIAL_COLUMNS",
    "check_message_columns",
    "derived_message_id",
    "row_message",
]

ID_NAMESPACE = uuid.UUID("7f6c0b1e-5d0b-4c55-9a55-3a6a3c1f2f10")
RUN_ID_HEADER = "SqlQueue.Spark.RunId"
SPECIAL_COLUMNS = ("body", "headers", "message_id", "time_to_be_received_seconds")


def derived_message_id(run_id: str, part: int, position: int) -> uuid.UUID:
    """The Id of the row at ``position`` of partition ``part`` when the row names none."""
    return uuid.uuid5(ID_NAMESPACE, f"{run_id}/{part}/{position}")


def row_message(
    run_id: str, part: int, position: int, row: dict[str, Any], *, message_type: str | None = None
) -> OutgoingMessage:
    """One DataFrame row (``Row.asDict(recursive=True)``) as a message; see the module's doc."""
    headers: dict[str, str | None] = {RUN_ID_HEADER: run_id}
    if message_type:
        headers[ENCLOSED_MESSAGE_TYPES] = message_type
    given = row.get("message_id")
    if given:
        try:
            message_id = uuid.UUID(str(given))
        except ValueError:
            raise ValueError(
                f"row {position} of partition {part}: message_id {str(given)[:80]!r} is not a UUID"
            ) from None
    else:
        message_id = derived_message_id(run_id, part, position)
    if row.get("body") is not None:
        body = row["body"]
        body = bytes(body) if isinstance(body, bytearray | memoryview) else body
    else:
        payload = {key: value for key, value in row.items() if key not in SPECIAL_COLUMNS}
        body = json.dumps(_jsonable(payload), ensure_ascii=False, separators=(",", ":"))
        headers[CONTENT_TYPE] = "application/json"
    if isinstance(row.get("headers"), dict):
        headers.update({str(k): None if v is None else str(v) for k, v in row["headers"].items()})
    ttbr = row.get("time_to_be_received_seconds")
    return OutgoingMessage(
        body,
        headers,
        timedelta(seconds=float(ttbr)) if ttbr else None,
        message_id,
    )


def check_message_columns(schema: StructType) -> None:
    """Refuse, before anything is sent, a frame whose rows the mapping would misread or partly drop.

    With a ``body`` column only the other special columns may be present (any other column would be
    dropped); the special columns must have types the mapping reads.
    """
    from pyspark.sql import types as T

    fields = {field.name: field.dataType for field in schema.fields}
    problems = []
    if "body" in fields and not isinstance(fields["body"], T.BinaryType | T.StringType):
        problems.append(f"body must be binary or string, not {fields['body'].simpleString()}")
    headers = fields.get("headers")
    if headers is not None and not (
        isinstance(headers, T.MapType)
        and isinstance(headers.keyType, T.StringType)
        and isinstance(headers.valueType, T.StringType)
    ):
        problems.append(f"headers must be map<string,string>, not {headers.simpleString()}")
    if "message_id" in fields and not isinstance(fields["message_id"], T.StringType):
        problems.append(f"message_id must be a UUID string, not {fields['message_id'].simpleString()}")
    ttbr = fields.get("time_to_be_received_seconds")
    if ttbr is not None and not isinstance(ttbr, T.NumericType):
        problems.append(f"time_to_be_received_seconds must be a number, not {ttbr.simpleString()}")
    if "body" in fields:
        dropped = [name for name in fields if name not in SPECIAL_COLUMNS]
        if dropped:
            problems.append(
                f"column(s) {', '.join(dropped)} would be dropped: with a body column only "
                f"{', '.join(SPECIAL_COLUMNS[1:])} are read (drop them, or drop body to send each row "
                "as JSON)"
            )
    if problems:
        raise ConfigurationError("the rows cannot be sent as messages: " + "; ".join(problems))
