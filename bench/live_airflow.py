"""A real Airflow for the orchestration suite: scripts/airflow.sh's deployment (PostgreSQL, api-server,
scheduler with the platform's LocalExecutor, dag-processor, triggerer) on a scratch home and free
ports, driven through REST API v2 as the UI's trigger form drives it.

The idle deployment uses CPU of its own (the scheduler's loop, 5.7% of a core at its 0.2 s idle
sleep, and the other processes' polls): the suite pauses it while it times the other sides, so
that the one job, the baseline, is timed on the machine the other suites have, without Airflow.
In the run that first timed this side (6b1f41f), with Airflow running beside it the one job took
9.5-10.8 s, against 9.0-9.7 s in the run before without it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime

from lakehouse.services.process import free_port
from lakehouse.settings import PROJECT_ROOT

SCRIPT = str(PROJECT_ROOT / "scripts" / "airflow.sh")
# PostgreSQL runs as its own user, so its cluster must be under a folder that user can enter (not /tmp
# under a private home): the project's ignored .cache, as the end-to-end tests keep theirs.
AIRFLOW_HOME = PROJECT_ROOT / ".cache" / "bench" / "airflow-live"
READY_SECONDS = 300
RUN_SECONDS = 900


class LiveAirflow:
    """Airflow started on ``lakehouse_env``'s settings; a REST client signed in as its admin."""

    def __init__(self, lakehouse_env: dict[str, str]):
        ports = (
            "AIRFLOW_PORT",
            "AIRFLOW_PG_PORT",
            "AIRFLOW_HEALTH_PORT",
            "AIRFLOW_STATSD_PORT",
            "AIRFLOW_METRICS_PORT",
        )
        self.env = {**os.environ, **lakehouse_env, "AIRFLOW_HOME": str(AIRFLOW_HOME)} | {
            port: str(free_port()) for port in ports
        }
        self.base_url = f"http://127.0.0.1:{self.env['AIRFLOW_PORT']}"
        self.token = ""

    def __enter__(self) -> LiveAirflow:
        subprocess.run([SCRIPT, "stop"], env=self.env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(AIRFLOW_HOME)], check=True)
        started = subprocess.run([SCRIPT, "start"], env=self.env, capture_output=True, text=True, timeout=900)
        if started.returncode != 0:
            raise RuntimeError(f"scripts/airflow.sh start failed:\n{started.stdout[-2000:]}\n{started.stderr[-2000:]}")
        try:
            password = json.loads((AIRFLOW_HOME / "passwords.json").read_text())["admin"]
            login = {"username": "admin", "password": password}
            self.token = self._request("POST", "/auth/token", login, signed_in=False)["access_token"]
            self._wait_for(lambda: "lakehouse_backfill" in self._dag_ids(), "the dag-processor to register the DAGs")
            self._request("PATCH", "/api/v2/dags/lakehouse_backfill", {"is_paused": False})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run([SCRIPT, "stop"], env=self.env, capture_output=True, timeout=120)

    @contextlib.contextmanager
    def paused(self):
        """Airflow's processes stopped meanwhile (SIGSTOP, then SIGCONT): a side timed inside runs on a
        machine without them. Each runs in a session of its own, which scripts/airflow.sh notes in
        its run folder; the liveness probe of scripts/supervise.sh is in the scheduler's, paused with it.
        (Its PostgreSQL sleeps when nobody asks it anything.)"""
        sessions = [path.read_text().strip() for path in (AIRFLOW_HOME / "run").glob("*.pid")]
        for session in sessions:
            subprocess.run(["pkill", "-STOP", "-s", session], check=False)
        try:
            yield
        finally:
            for session in sessions:
                subprocess.run(["pkill", "-CONT", "-s", session], check=False)

    def backfill_seconds(self, conf: dict) -> float:
        """Seconds from triggering ``lakehouse_backfill`` with ``conf`` to its run's end, by Airflow's
        own end date (the same machine's clock); a failed run raises."""
        triggered = datetime.now(UTC)
        run = self._request("POST", "/api/v2/dags/lakehouse_backfill/dagRuns", {"logical_date": None, "conf": conf})
        path = f"/api/v2/dags/lakehouse_backfill/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
        ended = self._wait_for(lambda: self._finished(path), f"run {run['dag_run_id']}", RUN_SECONDS)
        if ended["state"] != "success":
            raise RuntimeError(f"the backfill run {run['dag_run_id']} ended {ended['state']} (logs in {AIRFLOW_HOME})")
        return (datetime.fromisoformat(ended["end_date"].replace("Z", "+00:00")) - triggered).total_seconds()

    def _finished(self, path: str) -> dict | None:
        run = self._request("GET", path)
        return run if run["state"] in ("success", "failed") else None

    def _dag_ids(self) -> set[str]:
        return {dag["dag_id"] for dag in self._request("GET", "/api/v2/dags?limit=50")["dags"]}

    @staticmethod
    def _wait_for(answer, what: str, timeout: float = READY_SECONDS):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := answer():
                return found
            time.sleep(0.5)
        raise RuntimeError(f"waited {timeout:.0f} s for {what}")

    def _request(self, method: str, path: str, body: dict | None = None, signed_in: bool = True):
        headers = {"Content-Type": "application/json"} | (
            {"Authorization": f"Bearer {self.token}"} if signed_in else {}
        )
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
        return json.loads(text) if text else None
