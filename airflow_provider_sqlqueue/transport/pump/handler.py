"""The handler a pump runs: loading one named ``module:function`` and telling which arguments it takes."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from ...model.errors import ConfigurationError

__all__ = ["Handler", "load_handler", "takes_context"]

Handler = Callable[..., Any]


def load_handler(handler: Handler | str) -> Handler:
    """A callable, or one named ``package.module:function`` (or ``package.module.function``)."""
    if callable(handler):
        return handler
    if not isinstance(handler, str) or not handler.strip():
        raise ConfigurationError(f"a handler is a callable or 'module:function', not {handler!r}")
    text = handler.strip()
    module_name, _, attribute = text.partition(":") if ":" in text else text.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(f"handler {text!r} is not 'module:function'")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        raise ConfigurationError(f"cannot load handler {text!r}: {error}") from error
    if not callable(target):
        raise ConfigurationError(f"handler {text!r} is not callable")
    return target


def takes_context(handler: Handler) -> bool:
    """True when the handler accepts a second positional argument (the :class:`MessageContext`)."""
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)
