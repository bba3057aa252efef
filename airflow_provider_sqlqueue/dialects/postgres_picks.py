"""How PostgreSQL statements pick rows of a queue: the shapes every receive, purge and hold is written in.

Both guard against the planner: one against a plan that runs a pick more than once, the other against an
estimate taken from statistics that lag a queue whose RowVersions only grow.
"""

from __future__ import annotations

__all__ = ["AFTER_ROW_VERSION", "THROUGH_ROW_VERSION", "delete_taken"]

# "after a RowVersion" as the planner cannot see the RowVersion (an InitPlan's value): it then estimates a
# third of the table after it and walks the index in order up to LIMIT. Seeing the value, it estimates from
# statistics that lag a queue whose RowVersions only grow, may expect a few hundred rows where half the queue
# lies, and then reads and sorts every one of them for each receive.
AFTER_ROW_VERSION = "RowVersion > (SELECT %s::bigint)"
# "up to a RowVersion", hidden from the planner for the same reason.
THROUGH_ROW_VERSION = "RowVersion <= (SELECT %s::bigint)"


def delete_taken(table: str, taken: str, returning: str = "") -> str:
    """``DELETE`` the rows a ``SELECT ... LIMIT`` picks, with the pick made exactly once.

    Written as ``WHERE RowVersion IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` the pick may run again
    for every row the planner tries (a nested-loop semi join rescans it); each run skips the rows the
    statement already deleted and picks the next ones, so one receive of 1 can delete the whole queue. A
    ``MATERIALIZED`` CTE is evaluated once and rescanned from its stored rows.
    """
    suffix = f" {returning}" if returning else ""
    return (
        f"WITH taken AS MATERIALIZED ({taken}) "
        f"DELETE FROM {table} WHERE RowVersion IN (SELECT RowVersion FROM taken){suffix}"
    )
