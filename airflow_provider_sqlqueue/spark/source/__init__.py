"""The ``sqlqueue`` Spark data source (PySpark's Python Data Source API): ``spark.read``, ``spark.readStream``
and ``DataFrame.write`` with ``format("sqlqueue")``. Options are in docs/spark-options.md, guarantees in
docs/spark-exactly-once.md.

One module per part:

- ``options.py``: :class:`SourceOptions`, the options and credentials;
- ``datasource.py``: :class:`SqlQueueDataSource`, the format;
- ``batch.py``: the batch reader, :func:`ack_read` and :func:`release_read`;
- ``stream.py``: the stream reader, offsets as staging positions;
- ``staging.py``: receives into the bridge's staging table, and reads of staged rows;
- ``returned_rows.py``: the columns of the rows it returns (:func:`source_columns` names some of them);
- ``in_place.py``: the reads of rows held in the queue (PostgreSQL), and ``hold.py``, the hold itself: a
  batch kept in the queue under one connection's uncommitted delete;
- ``transactions.py``: the bridge's statements run in their transaction, and the row counts of a
  compare-and-set; ``heartbeat.py``: a run's heartbeat; ``errors.py``: the errors a read raises;
- ``row_batches.py``, ``columns.py``, ``schema.py``: a SELECT's rows in batches, the messages' columns
  and their schema;
- ``writer.py``: the write side (``df.write``).

The drain job (``spark/drain/``) is an application of this source and takes these parts from it; nothing
here imports the drain.
- ``pyspark_pair.py``: the refusal of a pyspark and pyspark-client of two versions, checked where a user's
  code first takes the data source or these names (not in Spark's own processes, which unpickle
  ``datasource.py`` directly).

``SqlQueueDataSource`` is exported by ``airflow_provider_sqlqueue.spark``. Each name here is imported when
it is first used, not when the package is imported: Spark's planning processes and workers import this
package (the parent of ``datasource.py``) and need none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .pyspark_pair import check_pyspark_pair

if TYPE_CHECKING:
    from .batch import ack_read, release_read
    from .options import SourceOptions
    from .returned_rows import source_columns

__all__ = ["SourceOptions", "ack_read", "release_read", "source_columns"]


def __getattr__(name: str) -> Any:
    if name in ("ack_read", "release_read"):
        check_pyspark_pair()
        from . import batch

        return getattr(batch, name)
    if name == "source_columns":
        check_pyspark_pair()
        from .returned_rows import source_columns

        return source_columns
    if name == "SourceOptions":
        from .options import SourceOptions

        return SourceOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
