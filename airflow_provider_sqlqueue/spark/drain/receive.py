"""Phase 1 of a drain: competing receivers on the executors move messages from the queue into staging.

Each task has its own connection and stages each batch in the same transaction as the receive's DELETE, so
a failed task rolls back only its open batch (those messages are back in the queue). The Spark action
returns only counts: a re-evaluation could only receive *more* messages into staging, and the run state
stops even that once phase 2 has begun.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from ..moves import stage_batch
from ..source.errors import InjectedFault
from ..tables import BridgeSql, bridge_tables
from .config import DrainConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["receive_into_staging", "receive_partition"]


def receive_into_staging(
    spark: SparkSession, config: DrainConfig, job_attempt: int, already_staged: int
) -> list[dict[str, Any]]:
    """Driver side of phase 1: run ``config.partitions`` receivers; return each task's counts.

    ``already_staged`` (messages an earlier attempt of the run staged) counts against ``max_messages``.
    """
    quotas: list[int | None] = [None] * config.partitions
    if config.max_messages is not None:
        remaining = max(config.max_messages - already_staged, 0)
        quotas = [
            remaining // config.partitions + (1 if i < remaining % config.partitions else 0)
            for i in range(config.partitions)
        ]
    function = partial(receive_partition, config, job_attempt, quotas)
    rdd = spark.sparkContext.parallelize(range(config.partitions), config.partitions)
    # the one action on this RDD; it returns counts only, so nothing received is ever re-derived
    return rdd.mapPartitionsWithIndex(function).collect()


def receive_partition(
    config: DrainConfig, job_attempt: int, quotas: list[int | None], index: int, _: Iterable[Any]
) -> Iterator[dict[str, Any]]:
    """Executor side of phase 1: receive batches into staging until empty, the quota, or a state change."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    started = time.monotonic()
    stats = {"partition": index, "attempt": attempt, "received": 0, "expired": 0, "poisoned": 0, "batches": 0}
    stop_reason = "empty"
    with config.open(pool_size=1, max_overflow=0) as transport:
        queue = transport.queue(config.input_queue)
        sql = BridgeSql(transport, bridge_tables(transport, config.input_queue, config.prefix))
        remaining = quotas[index]
        if remaining is not None:
            with transport.connection() as connection:
                cursor = connection.cursor()
                cursor.execute(sql.count_part(), (config.run_id, job_attempt, index))
                remaining -= int(transport.dialect.fetch_rows(cursor)[0][0])
                connection.commit()
        while remaining is None or remaining > 0:
            size = config.batch_size if remaining is None else min(config.batch_size, remaining)
            drill = partial(_drill, config, attempt, stats["batches"], index)
            run_id = config.run_id
            moved = stage_batch(
                transport, queue, sql, run_id, size, index, job_attempt=job_attempt, before_commit=drill
            )
            if moved is None:
                stop_reason = "run is no longer receiving"
                break
            received, expired, poisoned = moved.staged, moved.expired, moved.poisoned
            stats["received"] += received
            stats["expired"] += expired
            stats["poisoned"] += poisoned
            stats["batches"] += 1 if (received or expired or poisoned) else 0
            if remaining is not None:
                remaining -= received
            if not received and not expired and not poisoned:
                break
        else:
            stop_reason = "limit"
    stats["stopped"] = stop_reason
    stats["seconds"] = round(time.monotonic() - started, 3)
    yield stats


def _drill(config: DrainConfig, attempt: int, batches: int, index: int) -> None:
    if config.fail_receive_batch is not None and attempt == 0 and batches + 1 == config.fail_receive_batch:
        raise InjectedFault(
            f"drill: the first attempt of partition {index} fails inside its receive "
            f"{config.fail_receive_batch}, before the commit"
        )
