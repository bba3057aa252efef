"""SQL Server's side of deep queues (docs/dba-maintenance.md), held on the statements of both layouts.

What the DBA guide says about a queue of millions of rows on SQL Server rests on these properties of the
rendered T-SQL, checked here for the ``clustered`` and the ``heap`` layout (SQL Server cannot run where this
suite is developed; the statements are also executed on Babelfish by the live suite):

- the RowVersion key is an ever-increasing ``bigint IDENTITY(1,1)``, so sends append at the end of its index
  and never split a page in the middle; receives delete from the other end;
- the RowVersion index is the clustered index (``clustered``) or a non-clustered one over the heap (``heap``);
- a receive reads that index from its start (``TOP(?) ... ORDER BY [RowVersion]``) skipping the rows other
  receivers hold (``READPAST``), and has no low-water mark: SQL Server's ghost cleanup removes the deleted
  rows' ghost records in the background, which PostgreSQL's dead tuples wait for a vacuum to do.
"""

from __future__ import annotations

import pytest
from sqlglot import exp, parse_one

from airflow_provider_sqlqueue.dialects.babelfish import BabelfishDialect
from airflow_provider_sqlqueue.dialects.base import TableOptions
from airflow_provider_sqlqueue.dialects.sqlserver import SqlServerDialect
from airflow_provider_sqlqueue.model.address import QueueAddress

ADDRESS = QueueAddress("orders", "sales")


@pytest.mark.parametrize("layout", ["clustered", "heap"])
def test_the_rowversion_key_only_grows_and_keys_the_index_receives_read(layout: str) -> None:
    dialect = SqlServerDialect()
    options = TableOptions(layout=layout)
    table = parse_one(dialect.create_table(ADDRESS, options), read="tsql")
    (rowversion,) = [c for c in table.find_all(exp.ColumnDef) if c.name == "RowVersion"]
    assert rowversion.args["kind"].this == exp.DataType.Type.BIGINT
    assert "IDENTITY(1, 1)" in rowversion.sql(dialect="tsql").upper().replace("IDENTITY (", "IDENTITY(")
    (index,) = [spec for spec in dialect.indexes(ADDRESS, options) if spec.name == "Index_RowVersion"]
    kind = "CLUSTERED" if layout == "clustered" else "NONCLUSTERED"
    assert f"CREATE {kind} INDEX [Index_RowVersion]" in index.create
    assert "([RowVersion] ASC)" in index.create


@pytest.mark.parametrize("dialect", [SqlServerDialect(), BabelfishDialect()], ids=["sqlserver", "babelfish"])
def test_a_receive_reads_from_the_head_past_held_rows_without_a_low_water_mark(dialect) -> None:
    receive = dialect.sql("receive_batch", ADDRESS)
    assert "READPAST" in receive and "TOP(?)" in receive and "ORDER BY [RowVersion]" in receive
    assert ">" not in receive.split("ORDER BY")[0], "no RowVersion bound: every receive starts at the head"
    assert dialect.optional_sql("receive_batch_after", ADDRESS) is None
