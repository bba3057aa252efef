"""The user's transform: found by dotted path (shipped with ``--py-files``), applied to the messages
DataFrame, its result checked and given the run id column the sink asks for."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...transport import ConfigurationError
from .config import DrainConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["apply_transform", "load_transform"]


def load_transform(path: str | None) -> Callable[[DataFrame], DataFrame]:
    """Import ``package.module.function`` (or ``package.module:function``); None is the identity."""
    if not path:
        return lambda frame: frame
    module_name, separator, name = path.partition(":")
    if not separator:
        module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ConfigurationError(f"transform {path!r} is not a dotted path like package.module.function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"transform {path!r}: cannot import {module_name!r} ({error}); ship it with --py-files"
        ) from error
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigurationError(f"transform {path!r}: {module_name} has no function {name!r}")
    return function


def apply_transform(
    transform: Callable[[DataFrame], DataFrame], messages: DataFrame, config: DrainConfig
) -> DataFrame:
    """The transform's result for ``messages``, with ``config.run_id_column`` for table and queue sinks."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    result = transform(messages)
    if not isinstance(result, DataFrame):
        raise ConfigurationError(
            f"transform {config.transform} returned {type(result).__name__}, not a DataFrame"
        )
    if config.run_id_column and config.parsed_sink.kind in ("table", "queue"):
        result = result.withColumn(config.run_id_column, F.lit(config.run_id))
    return result
