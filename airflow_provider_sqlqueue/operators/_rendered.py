"""Templated arguments as ``execute`` sees them, after Airflow has resolved XComArgs and rendered Jinja.

The constructors keep templated arguments as they are given (an ``XComArg`` or a Jinja string cannot be
converted when the DAG is parsed); these helpers turn the resolved value into what the operator needs.
A Jinja template renders to text unless the DAG sets ``render_template_as_native_obj=True``: a list or a
dict rendered that way (``"{{ ti.xcom_pull(...) }}"``) is its Python or JSON literal, and is decoded here.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any


def _literal(text: str) -> Any:
    """The value a rendered template stands for: JSON first, then a Python literal; else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def as_list(name: str, value: Any) -> list[Any]:
    """A list argument: a list, a tuple, or text rendered from a list."""
    decoded = _literal(value) if isinstance(value, str) else value
    if isinstance(decoded, Sequence) and not isinstance(decoded, str | bytes | bytearray):
        return list(decoded)
    raise ValueError(
        f"{name} must be a list, not {type(value).__name__} {str(value)[:80]!r}: pass a list, a task's "
        "output (XComArg), or a template that renders one (a JSON or Python list literal)"
    )


def as_names(name: str, value: Any) -> list[str]:
    """Queue names: one name, a list of names, or text rendered from a list of names."""
    if value is None:
        return []
    decoded = _literal(value) if isinstance(value, str) else value
    if isinstance(decoded, str):
        return [decoded] if decoded else []
    items = as_list(name, decoded)
    if not all(isinstance(item, str) and item for item in items):
        raise ValueError(f"{name} must be queue names (non-empty strings), not {items!r}")
    return items


def as_mapping(name: str, value: Any) -> dict[str, Any]:
    """A dict argument: a mapping, None or empty text (nothing), or text rendered from a dict."""
    if value is None or value == "":
        return {}
    decoded = _literal(value) if isinstance(value, str) else value
    if isinstance(decoded, Mapping):
        return dict(decoded)
    raise ValueError(
        f"{name} must be a dict, not {type(value).__name__} {str(value)[:80]!r}: pass a dict, a task's "
        "output (XComArg), or a template that renders one (a JSON or Python dict literal)"
    )
