"""Runs one DAG with ``dag.test()`` in a fresh process, against its own Airflow home and lakehouse home.

Used by the DAG tests as ``python -m tests.airflow_harness DAG_ID LOGICAL_DATE CONF_JSON``; prints the
run's state and each task's on the last line, as JSON. A separate process gives Airflow its own
configuration (read once at import) and keeps it out of the test process.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime


def main() -> None:
    dag_id, logical_date, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=f"dags/{dag_id}.py").get_dag(dag_id)
    when = datetime.fromisoformat(logical_date) if logical_date != "none" else None
    kwargs = {"run_conf": conf}
    if when is not None:
        kwargs.update(logical_date=when, run_after=when)
    run = dag.test(**kwargs)
    states = {f"{ti.task_id}[{ti.map_index}]" if ti.map_index >= 0 else ti.task_id: str(ti.state)
              for ti in run.get_task_instances()}
    print(json.dumps({"state": str(run.state), "tasks": states}))


if __name__ == "__main__":
    main()
