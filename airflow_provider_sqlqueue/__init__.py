"""airflow-provider-sqlqueue: durable message queues in SQL tables for Airflow and Spark.

The transport core (``airflow_provider_sqlqueue.transport``) needs no Airflow; the Airflow pieces live in
``hooks``, ``sensors``, ``triggers``, ``operators`` and ``queues``.
"""

__version__ = "0.1.0"
