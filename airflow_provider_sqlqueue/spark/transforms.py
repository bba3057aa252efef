"""Example transforms for the drain job (``DataFrame -> DataFrame``), named by dotted path.

A transform receives the messages DataFrame (columns in
:func:`~airflow_provider_sqlqueue.spark.drain.messages.messages_schema` plus ``body_json``, a VARIANT for JSON
bodies) and returns any DataFrame; the job writes that to the sink.
These read the order messages of the example DAG: ``{"order_id", "customer", "amount", "currency",
"items", "placed_at"}``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ORDER_SCHEMA = "order_id long, customer string, amount double, currency string, items int, placed_at string"


def identity(messages: DataFrame) -> DataFrame:
    """Every column as received."""
    return messages


# The columns of order_rows' result, as ProvisionSparkBridgeOperator / create_sink_table take them:
# (name, logical type, nullable).
ORDER_ROW_COLUMNS = [
    ("message_id", "string", False),
    ("order_id", "long", True),
    ("customer", "string", True),
    ("amount", "double", True),
    ("currency", "string", True),
    ("items", "int", True),
    ("time_sent", "timestamp", True),
]


# The message columns order_rows reads: a sqlqueue read given .schema(source_columns(*ORDER_MESSAGE_COLUMNS))
# builds only these.
ORDER_MESSAGE_COLUMNS = ("message_id", "body_text", "time_sent")


def order_rows(messages: DataFrame) -> DataFrame:
    """One row per order message: its message id and the parsed order (for table and file sinks); it reads
    the columns in ``ORDER_MESSAGE_COLUMNS``."""
    from pyspark.sql import functions as F

    order = F.from_json(F.col("body_text"), ORDER_SCHEMA)
    return messages.select(
        "message_id",
        order.order_id.alias("order_id"),
        order.customer.alias("customer"),
        order.amount.alias("amount"),
        order.currency.alias("currency"),
        order.items.alias("items"),
        F.col("time_sent"),
    )


def orders_by_customer(messages: DataFrame) -> DataFrame:
    """Orders, items and revenue per customer and currency."""
    from pyspark.sql import functions as F

    orders = order_rows(messages)
    return (
        orders.where(F.col("customer").isNotNull())
        .groupBy("customer", "currency")
        .agg(
            F.count(F.lit(1)).alias("orders"),
            F.sum("items").cast("long").alias("items"),
            F.round(F.sum("amount"), 2).alias("amount"),
            F.min("time_sent").alias("first_sent"),
            F.max("time_sent").alias("last_sent"),
        )
    )
