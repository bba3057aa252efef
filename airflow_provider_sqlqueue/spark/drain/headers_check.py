"""Phase 2's executors read every held message's headers anyway (``read_in_place``): they, not the driver's
hold, find the unreadable ones, and the commit moves those to the error queue.

Reading the headers in phase 1 as well cost the hold half its time. Two set-valued accumulators carry what
the executors found back to the driver: the RowVersions whose headers are not a header map, and the slices
read to their end. A union does not mind a task that ran twice (a retry, a recomputed cached block). A
transform that does not read every slice (a ``limit``, a result that ignores its input) leaves slices
unchecked; the driver reads those slices' headers itself before the commit, so no unreadable message is
ever deleted without reaching the error queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["HeadersCheck"]


class SetUnion:
    """An accumulator's parameter (PySpark's ``AccumulatorParam`` protocol): sets, merged by union."""

    def zero(self, value: set) -> set:
        return set()

    def addInPlace(self, value1: set, value2: set) -> set:
        value1 |= value2
        return value1


@dataclass
class HeadersCheck:
    """What the executors found in the held rows' headers: unreadable RowVersions, slices read to the end."""

    unreadable: Any
    checked: Any

    @classmethod
    def start(cls, spark: SparkSession) -> HeadersCheck:
        """Two empty accumulators on ``spark``'s context (driver side)."""
        context = spark.sparkContext
        return cls(context.accumulator(set(), SetUnion()), context.accumulator(set(), SetUnion()))

    def record(self, bounds: tuple[int, int], unreadable: list[int]) -> None:
        """Executor side: every row of the slice ``bounds`` was read; ``unreadable`` are the ones left out."""
        if unreadable:
            self.unreadable.add(set(unreadable))
        self.checked.add({(int(bounds[0]), int(bounds[1]))})

    def found(self) -> set[int]:
        """Driver side, after phase 2's jobs: the unreadable RowVersions the executors reported."""
        return set(self.unreadable.value)

    def unread(self, bounds: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """Driver side: the slices among ``bounds`` that no task read to their end."""
        checked = self.checked.value
        return [tuple(slice_) for slice_ in bounds if tuple(slice_) not in checked]
