"""OpenLineage for the operators that move messages: their queue and sink tables as datasets.

The OpenLineage provider calls ``get_openlineage_facets_on_complete`` after a task succeeds; without that
provider installed, the operators report nothing (as the common-sql operators do).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..hooks.sqlqueue import SqlQueueHook

log = logging.getLogger(__name__)


def table_dataset(hook: SqlQueueHook, name: str) -> Any:
    """A queue (or table) of the hook's database as an OpenLineage dataset."""
    from openlineage.client.event_v2 import Dataset

    return Dataset(namespace=hook.openlineage_namespace(), name=hook.openlineage_dataset_name(name))


def file_dataset(path: str) -> Any:
    """A file or directory Spark writes, named as the naming spec names files: ``file`` and its path for a
    local path, else the URL's ``scheme://authority`` and its path (``s3://bucket``, ``hdfs://host:port``)."""
    from openlineage.client.event_v2 import Dataset

    parts = urlsplit(path)
    if not parts.scheme or parts.scheme == "file" or len(parts.scheme) == 1:  # 1: a Windows drive letter
        return Dataset(namespace="file", name=parts.path if parts.scheme == "file" else path)
    scheme = "s3" if parts.scheme in ("s3a", "s3n") else parts.scheme
    return Dataset(namespace=f"{scheme}://{parts.netloc}", name=parts.path or "/")


def operator_lineage(
    conn_id: str, inputs: Iterable[str] = (), outputs: Iterable[str] = (), extra_outputs: Iterable[Any] = ()
) -> Any:
    """``OperatorLineage`` with the named queues/tables of ``conn_id`` as inputs and outputs; None when
    the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        log.debug("the OpenLineage provider is not installed; no lineage reported")
        return None
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id)
    try:
        return OperatorLineage(
            inputs=[table_dataset(hook, name) for name in dict.fromkeys(inputs)],
            outputs=[table_dataset(hook, name) for name in dict.fromkeys(outputs)] + list(extra_outputs),
        )
    finally:
        hook.close()


def sql_lineage(conn_id: str, sql: str | list[str]) -> Any:
    """The tables ``sql`` reads and writes, as common-sql operators report them: OpenLineage's SQL parser in
    the hook's dialect, datasets named through ``get_openlineage_database_info`` (so as the hook names its
    queues); None when the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.sqlparser import SQLParser
    except ImportError:
        log.debug("the OpenLineage provider is not installed; no lineage reported")
        return None
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id)
    try:
        connection = hook.connection
        parser = SQLParser(
            dialect=hook.get_openlineage_database_dialect(connection),
            default_schema=hook.get_openlineage_default_schema(),
        )
        return parser.generate_openlineage_metadata_from_sql(
            sql=sql,
            hook=hook,
            database_info=hook.get_openlineage_database_info(connection),
            use_connection=False,
        )
    finally:
        hook.close()
