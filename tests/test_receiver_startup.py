"""What provisioning does to a table receivers already use: ``create()`` on an existing table reports a
missing index and builds it only with ``add_missing_indexes=True``."""

from __future__ import annotations

import logging

import pytest
import rawsql

from airflow_provider_sqlqueue.dialects.base import IndexSpec, TableOptions
from airflow_provider_sqlqueue.transport import TableQueue

PROVISIONING_LOG = "airflow_provider_sqlqueue.transport.queue"


def _expires_index(queue: TableQueue) -> IndexSpec:
    return next(
        spec for spec in queue.dialect.indexes(queue.address, TableOptions()) if "Expires" in spec.name
    )


# ---- create() on an existing table ---------------------------------------------------------------------
def test_create_reports_an_index_missing_from_an_existing_table_and_builds_it_only_when_asked(
    queue: TableQueue, caplog: pytest.LogCaptureFixture
) -> None:
    expires_index = _expires_index(queue)
    rawsql.drop_index(queue, expires_index.name)
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert queue.create() is False
    [warning] = [record for record in caplog.records if record.name == PROVISIONING_LOG]
    assert [finding.code for finding in queue.inspect()] == ["missing_expires_index"], "create() built it"
    assert warning.levelno == logging.WARNING
    assert queue.dialect.display_sql(expires_index.create) in warning.getMessage()
    assert "add_missing_indexes=True" in warning.getMessage()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert queue.create(add_missing_indexes=True) is False
    assert queue.inspect() == []
    assert any(expires_index.name in record.getMessage() for record in caplog.records)


def test_create_of_a_new_table_builds_its_indexes_without_being_asked(transport, caplog) -> None:
    fresh = transport.queue("fresh")
    with caplog.at_level(logging.WARNING, logger=PROVISIONING_LOG):
        assert fresh.create() is True
    assert fresh.inspect() == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_provision_operator_reports_a_missing_index_and_builds_it_with_its_flag(
    target, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_sqlqueue.operators.provision import ProvisionQueuesOperator

    for name, value in target.airflow_env("sqlqueue_startup").items():
        monkeypatch.setenv(name, value)

    def provision(**flags: bool) -> dict:
        operator = ProvisionQueuesOperator(
            task_id="provision",
            endpoint="Sales",
            audit_queue=None,
            sqlqueue_conn_id="sqlqueue_startup",
            **flags,
        )
        return operator.execute(context={})

    def names(listed: list[str]) -> list[str]:
        return [name.partition("@")[0] for name in listed]

    assert names(provision()["created"]) == ["Sales", "error"]
    with target.open() as transport:
        sales = transport.queue("Sales")
        rawsql.drop_index(sales, _expires_index(sales).name)
        left = provision()
        assert names(left["findings"]) == ["Sales"]
        [findings] = left["findings"].values()
        assert [finding["code"] for finding in findings] == ["missing_expires_index"]
        added = provision(add_missing_indexes=True)
        assert names(added["existing"]) == ["Sales", "error"] and added["findings"] == {}
        assert sales.inspect() == []
