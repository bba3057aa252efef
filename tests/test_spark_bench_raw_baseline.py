"""The Spark benchmark's raw baseline (benchmarks/spark_drain_bench.py --raw-baseline), which Babelfish's
figures are compared with where no SQL Server JDBC driver is available: on a SQLite queue, it writes every
message once with the fields the JDBC baseline parses, as a table or as parquet, and leaves the queue as it
was. No Spark; nothing about speed is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_sqlqueue.demo.orders import make_orders
from airflow_provider_sqlqueue.spark.config import URL_ENV
from airflow_provider_sqlqueue.spark.tables import create_sink_table
from airflow_provider_sqlqueue.transport import open_transport

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "spark_drain_bench.py"
COLUMNS = [
    ("message_id", "string", False),
    ("order_id", "long", True),
    ("customer", "string", True),
    ("amount", "double", True),
    ("currency", "string", True),
    ("items", "int", True),
    ("time_sent", "timestamp", True),
]


def _raw_baseline(url: str, *args: str) -> dict[str, object]:
    env = {**os.environ, URL_ENV: url, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--raw-baseline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("BENCH_RESULT ")]
    return json.loads(line.split(" ", 1)[1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("sink", ["table", "parquet"])
def test_the_raw_baseline_writes_every_message_once_with_its_parsed_fields(tmp_path: Path, sink: str) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    orders = make_orders(7, short_lived_every=None, body_bytes=300)
    expected = {(body := json.loads(message.body))["order_id"]: body for message in orders}
    with open_transport(url) as transport:
        queue = transport.queue("orders")
        queue.create()
        queue.send_batch(orders)
        create_sink_table(transport, "jdbc_rows", COLUMNS)
        with transport.connection() as connection:
            cursor = connection.cursor()
            cursor.execute("SELECT Id FROM orders", ())
            ids = {row[0] for row in cursor.fetchall()}
            connection.commit()
        files = tmp_path / "files"
        figures = _raw_baseline(url, *(["--files", str(files)] if sink == "parquet" else []))
        assert figures["written"] == 7
        if sink == "parquet":
            import pyarrow.parquet as pq

            rows = pq.ParquetDataset(str(files)).read().to_pylist()
        else:
            with transport.connection() as connection:
                cursor = connection.cursor()
                cursor.execute(f"SELECT {', '.join(name for name, _, _ in COLUMNS)} FROM jdbc_rows", ())
                rows = [dict(zip([name for name, _, _ in COLUMNS], row, strict=True)) for row in cursor]
                connection.commit()
        assert queue.count() == 7, "the baseline must leave the queue as it was"
    assert {row["message_id"] for row in rows} == ids
    for row in rows:
        order = expected[row["order_id"]]
        assert (row["customer"], row["amount"], row["currency"], row["items"]) == (
            order["customer"],
            order["amount"],
            order["currency"],
            order["items"],
        )
        assert row["time_sent"] is not None
