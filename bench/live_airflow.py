"""A real Airflow for the orchestration suite: scripts/airflow.sh's deployment (PostgreSQL, api-server,
scheduler with the platform's LocalExecutor, dag-processor, triggerer) on a scratch home and free
ports, driven through REST API v2 as the UI's trigger form drives it (lakehouse.ops.airflow_client).

The idle deployment uses CPU of its own (the scheduler's loop, 5.7% of a core at its 0.2 s idle
sleep, and the other processes' polls): the suite pauses it while it times the other sides, so
that the one job, the baseline, is timed on the machine the other suites have, without Airflow.
In the run that first timed this side (6b1f41f), with Airflow running beside it the one job took
9.5-10.8 s, against 9.0-9.7 s in the run before without it."""

from __future__ import annotations

from datetime import UTC, datetime

from lakehouse.ops.airflow_client import AirflowClient, AirflowDeployment
from lakehouse.settings import PROJECT_ROOT

# PostgreSQL runs as its own user, so its cluster must be under a folder that user can enter (not /tmp
# under a private home): the project's ignored .cache, as the end-to-end tests keep theirs.
AIRFLOW_HOME = PROJECT_ROOT / ".cache" / "bench" / "airflow-live"
BACKFILL_DAG = "lakehouse_backfill"
RUN_SECONDS = 900


class LiveAirflow(AirflowDeployment):
    """Airflow started afresh on ``lakehouse_env``'s settings, with its admin's client."""

    def __init__(self, lakehouse_env: dict[str, str]):
        super().__init__(AIRFLOW_HOME, lakehouse_env)
        self.admin: AirflowClient | None = None

    def __enter__(self) -> LiveAirflow:
        self.clear()
        try:
            self.start()
            self.admin = self.client()
            self.admin.poll_seconds = 0.5  # the run's time is Airflow's end date: polling only ends the wait
            self.admin.wait_for_dags({BACKFILL_DAG})
            self.admin.unpause(BACKFILL_DAG)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def backfill_seconds(self, conf: dict) -> float:
        """Seconds from triggering ``lakehouse_backfill`` with ``conf`` to its run's end, by Airflow's
        own end date (the same machine's clock); a failed run raises."""
        triggered = datetime.now(UTC)
        run_id = self.admin.trigger(BACKFILL_DAG, conf)
        ended = self.admin.finished_run(BACKFILL_DAG, run_id, RUN_SECONDS)
        if ended["state"] != "success":
            raise RuntimeError(f"the backfill run {run_id} ended {ended['state']} (logs in {AIRFLOW_HOME})")
        return (datetime.fromisoformat(ended["end_date"].replace("Z", "+00:00")) - triggered).total_seconds()
