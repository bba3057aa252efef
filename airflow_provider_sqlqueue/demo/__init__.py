"""The demo: README command 1 (``python -m airflow_provider_sqlqueue.demo.pipeline``)
and the order messages the example DAGs, tests and benchmarks send (``orders``).

Never imported by the runtime (transport, dialects, Airflow surface, Spark bridge, CLI): a deployment that
only runs queues does not depend on anything here.
"""
