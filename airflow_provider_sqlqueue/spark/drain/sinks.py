"""Where a drain's results go: checking the sink before anything is received, and writing the result rows
(into a table or a queue inside the run's commit transaction, or as files under the run's directory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...transport import ConfigurationError, OutgoingMessage, PermissionDenied, Transport
from ...transport.headers import CONTENT_TYPE, ENCLOSED_MESSAGE_TYPES
from ..config import safe_path_part
from ..source.transactions import execute, table_exists
from ..tables import BridgeSql, sink_table_ddl
from .config import DrainConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["RUN_ID_HEADER", "SinkWriter"]

RUN_ID_HEADER = "SqlQueue.Spark.RunId"


class SinkWriter:
    """The drain's sink (``config.sink``) on the driver."""

    def __init__(
        self, transport: Transport, sql: BridgeSql, config: DrainConfig, echo: Callable[[str], None]
    ) -> None:
        self.transport = transport
        self.sql = sql
        self.config = config
        self.sink = config.parsed_sink
        self.echo = echo

    def check(self, schema: StructType) -> None:
        """Refuse a sink that cannot take the transform's output (``schema``); create a missing sink table
        if the drain may create tables."""
        names = [f.name for f in schema.fields]
        if self.sink.is_file and not {"message_id", "message_ids"} & set(names):
            raise ConfigurationError(
                f"file sink {self.sink}: the transform's output needs a message_id (or message_ids) "
                "column so that readers can deduplicate; its columns are " + ", ".join(names)
            )
        if self.sink.kind == "table":
            self._prepare_table(schema)
        if self.sink.kind == "queue":
            target = self.transport.queue(self.sink.target)
            if not target.exists():
                raise ConfigurationError(f"sink queue {target.name} does not exist; provision it first")

    def _table_columns(self, address: Any) -> list[str]:
        statement = self.sql.table_columns(address)
        with self.transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute(statement, ())
            names = [column[0] for column in cursor.description]
            cursor.fetchall()
            connection.commit()
        return names

    def _prepare_table(self, schema: StructType) -> None:
        address = self.transport.resolve(self.sink.target)
        if not table_exists(self.transport, address):
            if not self.config.create_tables:
                raise ConfigurationError(
                    f"sink table {address} does not exist: create it in the provisioning step or run with "
                    "--create-tables"
                )
            columns = [(f.name, logical_type(f.dataType), f.nullable) for f in schema.fields]
            try:
                execute(self.transport, sink_table_ddl(self.transport, address, columns))
            except PermissionDenied as error:
                raise PermissionDenied(
                    f"creating the sink table {address} was refused; nothing was received. Create it in the "
                    f"provisioning step, or give this role CREATE on the schema ({error})"
                ) from error
            self.echo(f"created sink table {address}")
        existing = {name.lower() for name in self._table_columns(address)}
        missing = [f.name for f in schema.fields if f.name.lower() not in existing]
        if missing:
            raise ConfigurationError(
                f"sink table {address} has no column(s) {', '.join(missing)} that the transform produces"
            )

    def write_table(self, cursor: Any, columns: list[str], rows: Iterator[Any]) -> int:
        address = self.transport.resolve(self.sink.target)
        value = self.sql.sink_value
        if self.sql.can_copy:
            written = 0
            with cursor.copy(self.sql.copy_rows(address, columns)) as copy:
                for row in rows:
                    copy.write_row([value(item) for item in row])
                    written += 1
            return written
        per_statement = self.sql.rows_per_insert(len(columns))
        statement_full = self.sql.insert_rows(address, columns, per_statement)
        written = 0
        pending: list[Any] = []

        def flush() -> None:
            statement = statement_full if len(pending) == per_statement else None
            statement = statement or self.sql.insert_rows(address, columns, len(pending))
            cursor.execute(statement, pending_values())
            pending.clear()

        def pending_values() -> list[Any]:
            return [value(item) for row in pending for item in row]

        for row in rows:
            pending.append(row)
            written += 1
            if len(pending) == per_statement:
                flush()
        if pending:
            flush()
        return written

    def write_copy_chunks(self, cursor: Any, columns: list[str], chunks: Iterator[Any]) -> int:
        """COPY the chunks of :func:`~.copy_text.copy_chunks` (rows ``rows``, ``data``) into the sink table
        on ``cursor`` (PostgreSQL); return how many rows they held."""
        address = self.transport.resolve(self.sink.target)
        encoding = cursor.connection.info.encoding
        written = 0
        with cursor.copy(self.sql.copy_rows(address, columns)) as copy:
            for chunk in chunks:
                data = bytes(chunk.data)
                if encoding != "utf-8":
                    data = data.decode("utf-8").encode(encoding)
                copy.write(data)
                written += chunk.rows
        return written

    def write_queue(self, connection: Any, columns: list[str], rows: Iterator[Any]) -> int:
        target = self.transport.queue(self.sink.target)
        written = 0
        batch: list[OutgoingMessage] = []
        for row in rows:
            batch.append(self._as_message(row.asDict(recursive=True), columns))
            if len(batch) == 1000:
                target.send_on(connection, batch, commit=False)
                written += len(batch)
                batch = []
        if batch:
            target.send_on(connection, batch, commit=False)
            written += len(batch)
        return written

    def _as_message(self, row: dict[str, Any], columns: list[str]) -> OutgoingMessage:
        headers = {RUN_ID_HEADER: self.config.run_id}
        if self.config.message_type:
            headers[ENCLOSED_MESSAGE_TYPES] = self.config.message_type
        if "body" in row and row["body"] is not None:
            body = row["body"]
            if isinstance(row.get("headers"), dict):
                headers.update({str(k): None if v is None else str(v) for k, v in row["headers"].items()})
            body = bytes(body) if isinstance(body, bytearray | memoryview) else body
        else:
            headers[CONTENT_TYPE] = "application/json"
            body = self.sql.sink_value(row)  # JSON text of the row
        return OutgoingMessage(body, headers)

    def write_files(self, spark: SparkSession, result: DataFrame, staged: int) -> tuple[str, int]:
        """Write ``<path>/run_id=<run id>/`` (overwriting an earlier attempt of the run); return the
        directory and how many rows it holds."""
        base = self.sink.target.rstrip("/")
        path = f"{base}/run_id={safe_path_part(self.config.run_id)}"
        (result.write.mode("overwrite").format(self.sink.kind).save(path))
        written = spark.read.format(self.sink.kind).load(path).count() if staged else 0
        return path, written


def logical_type(data_type: Any) -> str:
    """The logical type :func:`sink_table_ddl` takes for a Spark type; ``json`` for any other."""
    from pyspark.sql import types as T

    mapping = [
        (T.StringType, "string"),
        (T.LongType, "long"),
        (T.IntegerType, "int"),
        (T.ShortType, "short"),
        (T.ByteType, "short"),
        (T.DoubleType, "double"),
        (T.FloatType, "float"),
        (T.BooleanType, "boolean"),
        (T.TimestampType, "timestamp"),
        (T.TimestampNTZType, "timestamp"),
        (T.DateType, "date"),
        (T.BinaryType, "binary"),
    ]
    for kind, name in mapping:
        if isinstance(data_type, kind):
            return name
    if isinstance(data_type, T.DecimalType):
        return f"decimal({data_type.precision},{data_type.scale})"
    return "json"
