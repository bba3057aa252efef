"""Provider metadata for Airflow's providers manager (the ``apache_airflow_provider`` entry point)."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from typing import Any

from . import __version__

INTEGRATION = "SQL Queue"
# What the Airflow pieces import beyond Airflow itself; all come with the 'airflow' extra.
AIRFLOW_EXTRA_MODULES = {
    "airflow.providers.common.sql": "apache-airflow-providers-common-sql",
    "airflow.providers.odbc": "apache-airflow-providers-odbc",
}
MISSING_EXTRA = (
    "airflow-provider-sqlqueue is installed without its 'airflow' extra ({missing} not installed): its "
    "connection type, hook, sensor, triggers and operators cannot load. "
    "pip install 'airflow-provider-sqlqueue[airflow]'"
)


def _option(kind: str, default: object, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "version_added": "0.1.0",
        "type": kind,
        "example": None,
        "default": str(default),
    }


# Every setting the provider reads from Airflow's configuration, declared here so that `airflow config list`
# names each with its default and `airflow config get-value sqlqueue <name>` answers. The Queues page's
# modules take their defaults from it; the hook's guard (False), the core's EXACT_BELOW and RETENTION (the
# depth history's), which may not import it, are held to it by tests/test_queues_page.py.
SETTINGS_SECTION: dict[str, Any] = {
    "description": "The SQL Queue provider: what a connection may name, and the Queues page.",
    "options": {
        "allow_file_options_in_extra": _option(
            "boolean",
            False,
            "Whether a PostgreSQL connection's extras may name files for libpq to read or write (sslkey, "
            "sslcert, passfile, ...). Off: a connection is untrusted input.",
        ),
        "page_refresh_seconds": _option(
            "integer", 20, "How often the open Queues page reads itself again (at least 2)."
        ),
        "exact_count_below": _option(
            "integer",
            100000,
            "Below which estimated depth the Queues page counts a queue exactly when asked, and the error "
            "queue always.",
        ),
        "age_warning_seconds": _option(
            "integer", 300, "Seconds a queue's oldest message may wait before it is shown yellow (0: off)."
        ),
        "age_alert_seconds": _option(
            "integer", 3600, "Seconds a queue's oldest message may wait before it is shown red (0: off)."
        ),
        "depth_warning": _option(
            "integer", 1000, "Messages a queue may hold before its depth is shown yellow (0: off)."
        ),
        "depth_alert": _option(
            "integer", 10000, "Messages a queue may hold before its depth is shown red (0: off)."
        ),
        "depth_history_retention_hours": _option(
            "integer",
            24,
            "Hours the depth history (sqlqueue_depth_samples, one sample a queue a minute, written by the "
            "triggers' polls, the sensors' pokes and the pumps' peeks) keeps its samples before they are "
            "deleted (0: sample nothing).",
        ),
    },
}


def setting_default(name: str) -> str:
    """The declared default of ``[sqlqueue] name``, as Airflow's configuration holds it (text)."""
    return str(SETTINGS_SECTION["options"][name]["default"])


def missing_airflow_extra() -> list[str]:
    """The distributions of the 'airflow' extra that are not installed."""
    missing = []
    for module, distribution in AIRFLOW_EXTRA_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(distribution)
    return missing


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata; warns (log and ``warnings``) when the 'airflow' extra is missing, since
    Airflow would otherwise drop the connection type with nothing but a debug line."""
    missing = missing_airflow_extra()
    if missing:
        message = MISSING_EXTRA.format(missing=", ".join(missing))
        logging.getLogger(__name__).error(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return {
        "package-name": "airflow-provider-sqlqueue",
        "name": "SQL Queue",
        "description": "Durable message queues in SQL tables (SQL Server, PostgreSQL, SQLite), following the "
        "NServiceBus SQL Server transport.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://docs.particular.net/transports/sql/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_provider_sqlqueue.hooks.sqlqueue"]}
        ],
        "sensors": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_provider_sqlqueue.sensors.queue"]}
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_sqlqueue.triggers.queue",
                    "airflow_provider_sqlqueue.triggers.reply",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_sqlqueue.operators.consume",
                    "airflow_provider_sqlqueue.operators.execute_and_send",
                    "airflow_provider_sqlqueue.operators.failed",
                    "airflow_provider_sqlqueue.operators.provision",
                    "airflow_provider_sqlqueue.operators.publish",
                    "airflow_provider_sqlqueue.operators.purge",
                    "airflow_provider_sqlqueue.operators.request_reply",
                    "airflow_provider_sqlqueue.operators.send",
                    "airflow_provider_sqlqueue.operators.spark_application",
                    "airflow_provider_sqlqueue.operators.spark_runs",
                    "airflow_provider_sqlqueue.operators.spark_submit",
                    "airflow_provider_sqlqueue.operators.vacuum",
                ],
            }
        ],
        "queues": ["airflow_provider_sqlqueue.queues.sqlqueue.SqlQueueMessageQueueProvider"],
        "config": {"sqlqueue": SETTINGS_SECTION},
        "plugins": [{"name": "sqlqueue", "plugin-class": "airflow_provider_sqlqueue.plugins.SqlQueuePlugin"}],
        "connection-types": [
            {
                "connection-type": "sqlqueue",
                "hook-class-name": "airflow_provider_sqlqueue.hooks.sqlqueue.SqlQueueHook",
                "hook-name": "SQL Queue",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"host": "Host (SQLite: absolute queue file path)", "schema": "Database"},
                    "placeholders": {
                        "host": "db.example.com, or for SQLite /var/lib/queues/queues.db",
                        "port": "1433 (SQL Server) or 5432 (PostgreSQL)",
                        "schema": "the database holding the queue tables",
                    },
                },
                "conn-fields": {
                    "engine": {
                        "label": "Engine",
                        "description": "sqlserver, postgresql or sqlite (a local file: absolute path in "
                        "Host, no Port, Login or Password); no default: a server is never taken for a file",
                        "schema": {
                            "type": ["string", "null"],
                            "enum": ["sqlserver", "postgresql", "sqlite", None],
                        },
                    },
                    "odbc_driver": {
                        "label": "ODBC driver (SQL Server)",
                        "description": "e.g. FreeTDS; used only where [providers.odbc] allow_driver_in_extra "
                        "is True, otherwise the hook's driver (default ODBC Driver 18 for SQL Server)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "default_schema": {
                        "label": "Default schema",
                        "description": "schema of queue names given without one (dbo / public)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "error_queue": {
                        "label": "Error queue",
                        "description": "where rows with unreadable headers go (default: error)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "subscription_table": {
                        "label": "Subscription table",
                        "description": "publish/subscribe's shared table, as an address such as "
                        "SubscriptionRouting@[messaging] (default: SubscriptionRouting, default schema)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "subscription_cache_seconds": {
                        "label": "Subscription cache (seconds)",
                        "description": "how long a publish reuses the subscriber queues it looked up "
                        "(default 5; 0 looks them up on every publish)",
                        "schema": {"type": ["number", "null"], "minimum": 0},
                    },
                    "connect_options": {
                        "label": "Driver options",
                        "description": "key=value;key=value: ODBC keywords (SQL Server) or libpq parameters",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "authentication": {
                        "label": "Authentication (SQL Server)",
                        "description": "Microsoft Entra ID through ODBC Driver 18's Authentication keyword, "
                        "e.g. ActiveDirectoryMsi (managed identity) or ActiveDirectoryServicePrincipal "
                        "(Login: client ID, Password: secret)",
                        "schema": {
                            "type": ["string", "null"],
                            "enum": [
                                "SqlPassword",
                                "ActiveDirectoryPassword",
                                "ActiveDirectoryServicePrincipal",
                                "ActiveDirectoryMsi",
                                "ActiveDirectoryIntegrated",
                                None,
                            ],
                        },
                    },
                },
            }
        ],
    }
