"""SQLite: the Spark bridge's control tables (text timestamps, as the queue table keeps Expires) and the clock
and bindings of its statements, the statements themselves being the shared ones of ``bridge.py``."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from .base import Dialect
from .bridge import BridgeColumnTypes, SecondsBinding

_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


class SqliteBridge(Dialect):
    """SqliteDialect's bridge statements."""

    bridge_column_types = BridgeColumnTypes(
        text="TEXT",
        timestamp="TEXT",
        uuid="TEXT",
        blob="BLOB",
        integer="INTEGER",
        key="varchar(200)",
        queue_name="varchar(450)",
        expires="TEXT",
    )
    bridge_stage_rows_limit = 3000
    bridge_insert_parameters = 30000

    def bridge_now(self) -> str:
        return _NOW

    def bridge_older_than(self, column: str) -> tuple[str, SecondsBinding]:
        # strftime takes the age as a modifier: '-90.000 seconds'
        return f"{column} < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)", lambda s: f"-{float(s):.3f} seconds"

    def bridge_seconds_since(self, column: str) -> str:
        return f"(julianday('now') - julianday({column})) * 86400.0"

    def bridge_expires_value(self, expires: datetime | None) -> Any:
        if expires is None:
            return None
        return expires.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    def bridge_sink_value(self, value: Any) -> Any:
        # sqlite3 binds no dates, decimals or booleans of its own: text (UTC, milliseconds) and integers
        if isinstance(value, datetime):
            moment = value.astimezone(timezone.utc) if value.tzinfo else value
            return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, bool):
            return int(value)
        return super().bridge_sink_value(value)
