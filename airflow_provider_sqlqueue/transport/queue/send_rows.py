"""The send parameters of many bare bodies at once, in the dialect's own order.

A dialect orders a message's values in :meth:`~airflow_provider_sqlqueue.dialects.base.Dialect.send_params`.
For a bare body sent without a time to be received, most dialects only place the values given (Id,
CorrelationId, headers, body) and constants such as NULL; asked once with marker values, that placement
builds every row of a batch with ``zip``, in C, instead of one Python call per message. A dialect that
changes one of those values gets its ``send_params`` called row by row, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

from ...dialects.base import Dialect

__all__ = ["plain_send_rows"]


class _Marker:
    """A value ``send_params`` can only pass through: found again by identity in its result."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_INPUTS = tuple(_Marker(name) for name in ("key", "text", "headers", "body"))
_NULL = -1
_layouts: dict[type[Dialect], tuple[int, ...] | None] = {}


def _layout_of(dialect: Dialect) -> tuple[int, ...] | None:
    """Per parameter, which input it is (0-3) or ``_NULL``; None when ``send_params`` does more than place."""
    kind = type(dialect)
    if kind in _layouts:
        return _layouts[kind]
    key, text, headers, body = _INPUTS
    try:
        placed = dialect.send_params(key, text, None, None, headers, body)  # type: ignore[arg-type]
    except Exception:  # it reads a value, so it does more than place it
        placed = ("derived",)
    layout: tuple[int, ...] | None = None
    if all(value is None or any(value is marker for marker in _INPUTS) for value in placed):
        layout = tuple(_NULL if value is None else _INPUTS.index(value) for value in placed)
        if sorted(index for index in layout if index != _NULL) != [0, 1, 2, 3]:
            layout = None  # an input left out or used twice
    _layouts[kind] = layout
    return layout


def plain_send_rows(
    dialect: Dialect,
    keys: Sequence[Any],
    texts: Sequence[str],
    headers: Sequence[str],
    bodies: Sequence[bytes],
) -> list[tuple[Any, ...]]:
    """``dialect.send_params(key, text, None, None, header, body)`` for each message, in order: its Id as
    the dialect binds it, the Id's text mirrored into CorrelationId, no ReplyToAddress, no time to be
    received."""
    if not len(keys) == len(texts) == len(headers) == len(bodies):
        raise ValueError("plain_send_rows takes as many keys, texts, headers and bodies")
    layout = _layout_of(dialect)
    if layout is None:
        send_params = dialect.send_params
        return [
            send_params(key, text, None, None, header, body)
            for key, text, header, body in zip(keys, texts, headers, bodies, strict=True)
        ]
    columns = (keys, texts, headers, bodies)
    placed = (repeat(None) if index == _NULL else columns[index] for index in layout)
    return list(zip(*placed, strict=False))  # the columns are as long as each other; repeat() has no end
