"""SQL Server: the Spark bridge's control tables (created unless ``OBJECT_ID`` finds them) and what its
statements do differently there: the ``SYSUTCDATETIME()`` clock, locking hints on a run's row, and a row
count returned by the statement itself. Babelfish runs them as they are; the golden files hold them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..model.address import QueueAddress
from .base import Dialect
from .bridge import BridgeColumnTypes, SecondsBinding

_NOW = "SYSUTCDATETIME()"


class SqlServerBridge(Dialect):
    """SqlServerDialect's bridge statements (BabelfishDialect's too)."""

    bridge_column_types = BridgeColumnTypes(
        text="nvarchar(max)",
        timestamp="datetime2",
        uuid="uniqueidentifier",
        blob="varbinary(max)",
        integer="int",
        key="nvarchar(200)",
        queue_name="nvarchar(450)",
        expires="datetime",  # as the queue table's Expires
    )
    bridge_stage_rows_limit = 200
    bridge_insert_parameters = 2000  # under the 2,100 parameters of one statement

    def bridge_now(self) -> str:
        return _NOW

    def bridge_older_than(self, column: str) -> tuple[str, SecondsBinding]:
        return f"{column} < DATEADD(second, -?, {_NOW})", int

    def bridge_seconds_since(self, column: str) -> str:
        return f"DATEDIFF(second, {column}, {_NOW})"

    def bridge_create_table(self, address: QueueAddress, columns: str) -> str:
        qualified = self.qualified_name(address)
        literal = qualified.replace("'", "''")
        return f"IF OBJECT_ID(N'{literal}', N'U') IS NULL CREATE TABLE {qualified} ({columns})"

    def bridge_counted(self, statement: str) -> str:
        # Connections run with NOCOUNT ON, so drivers report no row count: the statement returns it as a row.
        return f"{statement}; SELECT @@ROWCOUNT"

    def bridge_read_locked(self, runs: str, column: str, lock: str) -> str:
        hints = "UPDLOCK, HOLDLOCK, ROWLOCK" if lock == "UPDATE" else "HOLDLOCK, ROWLOCK"
        return f"SELECT {column} FROM {runs} WITH ({hints}) WHERE RunId = {self.placeholder}"

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        if expires is None:
            return None
        return expires.astimezone(timezone.utc).replace(tzinfo=None)

    def bridge_sink_value(self, value: Any) -> Any:
        # datetime2 and datetime columns hold no offset: an aware moment is stored as UTC
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(timezone.utc).replace(tzinfo=None)
        return super().bridge_sink_value(value)
