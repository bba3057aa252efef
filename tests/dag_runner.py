"""Run one example DAG through ``dag.test()`` and print its DagRun state; used as a subprocess by the tests.

Usage: ``python dag_runner.py <dag_id> [run_conf as JSON]``. The environment must name a migrated
``AIRFLOW_HOME``, the dags folder (``AIRFLOW__CORE__DAGS_FOLDER``) and the DAG's connections
(``AIRFLOW_CONN_<ID>``). The last line printed is ``DAGRUN_STATE=<state>``; the exit status is 0 only for
``success``; before it, one ``TASK_INSTANCE=<json>`` line per task instance (state, executor queue, try).
``dag.test()`` needs a DAG loaded from the dags folder (a DAG built in a test is not serialized).
"""

from __future__ import annotations

import json
import sys


def _task_instances(dag_run: object) -> list[dict[str, object]]:
    """The run's task instances as the metadata database holds them (state, executor queue, try)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance).filter(
            TaskInstance.dag_id == dag_run.dag_id,  # type: ignore[attr-defined]
            TaskInstance.run_id == dag_run.run_id,  # type: ignore[attr-defined]
        )
        return [
            {
                "task_id": ti.task_id,
                "map_index": ti.map_index,
                "state": getattr(ti.state, "value", ti.state),
                "queue": ti.queue,
                "try_number": ti.try_number,
            }
            for ti in rows
        ]


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(f"usage: {argv[0]} <dag_id> [run_conf as JSON]", file=sys.stderr)
        return 2
    dag_id = argv[1]
    run_conf = json.loads(argv[2]) if len(argv) == 3 else None

    from airflow.configuration import conf

    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0 and 3.1
        from airflow.models.dagbag import DagBag

    folder = conf.get("core", "dags_folder")
    bag = DagBag(folder)
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}", file=sys.stderr)
    dag = bag.get_dag(dag_id)
    if dag is None:
        print(f"no DAG {dag_id!r} in {folder}", file=sys.stderr)
        return 3
    dag_run = dag.test(run_conf=run_conf)
    state = getattr(dag_run, "state", None)
    state = getattr(state, "value", state)
    for ti in _task_instances(dag_run):
        print(f"TASK_INSTANCE={json.dumps(ti)}", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"DAGRUN_STATE={state}", flush=True)
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
