"""Airflow's REST API v2 as the UI drives it, and scripts/airflow.sh's deployment on free ports.

The orchestration benchmark and the end-to-end tests both start the platform's own deployment
(PostgreSQL, api-server, scheduler with the platform's executor, dag-processor, triggerer) and
trigger runs through this client, signed in with a JWT from the FAB auth manager's /auth/token."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from lakehouse.services.process import free_port
from lakehouse.settings import PROJECT_ROOT

AIRFLOW_SCRIPT = str(PROJECT_ROOT / "scripts" / "airflow.sh")
# scripts/airflow.sh's settings that name a port: a deployment of its own takes free ones.
PORT_SETTINGS = (
    "AIRFLOW_PORT",
    "AIRFLOW_PG_PORT",
    "AIRFLOW_HEALTH_PORT",
    "AIRFLOW_STATSD_PORT",
    "AIRFLOW_METRICS_PORT",
)
# The states a DAG run ends in.
FINISHED = frozenset({"success", "failed"})
REQUEST_SECONDS = 60
# Starting takes tens of seconds (a database migration among them), minutes on a busy machine.
START_SECONDS = 900
STOP_SECONDS = 120
Found = TypeVar("Found")


def wait_until(answer: Callable[[], Found | None], what: str, timeout: float, poll: float = 0.5) -> Found:
    """``answer()``'s first truthy value; TimeoutError when none came in time.

    Args:
        answer: asked until it returns something truthy.
        what: what is awaited, for the error.
        timeout: seconds to ask for.
        poll: seconds between two questions.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := answer():
            return found
        time.sleep(poll)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


class AirflowClient:
    """A REST API v2 client holding a JWT from /auth/token for ``username``."""

    # Seconds between two questions of a wait for a run's end: runs take tens of seconds to minutes.
    poll_seconds = 3.0

    def __init__(self, base_url: str, password: str, username: str = "admin"):
        self.base_url = base_url
        self.username, self.password = username, password  # a browser signs in with them too
        login = {"username": username, "password": password}
        self.token = self.request("POST", "/auth/token", login, auth=False)["access_token"]

    def request(self, method: str, path: str, body: dict | None = None, auth: bool = True):
        """The decoded JSON answer (None for an empty one); an answer other than 2xx raises HTTPError.

        Args:
            method: the HTTP method.
            path: the API path, from the server's root (``/api/v2/...``).
            body: sent as JSON, when given.
            auth: whether to send the token (False to see what an anonymous caller meets).
        """
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {self.token}"} if auth else {})
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as response:
            text = response.read()
        return json.loads(text) if text else None

    def status_of(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> tuple[int, str]:
        """The answer's HTTP status and, when refused, its body.

        Args:
            method: the HTTP method.
            path: the API path, from the server's root.
            body: sent as JSON, when given.
            auth: whether to send the token.
        """
        try:
            self.request(method, path, body, auth)
            return 200, ""
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def dag_ids(self) -> set[str]:
        return {dag["dag_id"] for dag in self.request("GET", "/api/v2/dags?limit=100")["dags"]}

    def wait_for_dags(self, dag_ids: set[str], timeout: float = 300) -> None:
        """Until the dag-processor has registered every one of ``dag_ids``."""
        wait_until(lambda: dag_ids <= self.dag_ids(), f"the dag-processor to register {sorted(dag_ids)}", timeout, 2)

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def runs(self, dag_id: str) -> list[dict]:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]

    def trigger(self, dag_id: str, conf: dict) -> str:
        """A manual run with ``conf``, as the UI's trigger form starts one: its run id."""
        body = {"logical_date": None, "conf": conf}
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"]

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.request("GET", self.run_path(dag_id, run_id))

    def state(self, dag_id: str, run_id: str) -> str:
        return self.run(dag_id, run_id)["state"]

    def finished_run(self, dag_id: str, run_id: str, timeout: float) -> dict:
        """The run once it has ended (its state one of FINISHED), asked every ``poll_seconds``."""

        def ended() -> dict | None:
            run = self.run(dag_id, run_id)
            return run if run["state"] in FINISHED else None

        return wait_until(ended, f"{dag_id} run {run_id} to finish", timeout, self.poll_seconds)

    def wait_for(self, dag_id: str, run_id: str, timeout: float) -> str:
        """The state the run ended in."""
        return self.finished_run(dag_id, run_id, timeout)["state"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.request("GET", self.run_path(dag_id, run_id) + "/taskInstances")["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str):
        path = self.run_path(dag_id, run_id) + f"/taskInstances/{task_id}/xcomEntries/return_value"
        return self.request("GET", path)["value"]


class AirflowDeployment:
    """scripts/airflow.sh's deployment in ``home``, on free ports unless ``settings`` name them.

    PostgreSQL runs as its own user, so ``home`` must be in a folder that user can enter (the
    project's ignored .cache, say; not /tmp under a private home)."""

    def __init__(self, home: Path, settings: dict[str, str]):
        self.home = home
        ports = {name: str(free_port()) for name in PORT_SETTINGS if name not in settings}
        self.env = {**os.environ, **settings, "AIRFLOW_HOME": str(home)} | ports
        self.base_url = f"http://127.0.0.1:{self.env['AIRFLOW_PORT']}"

    def clear(self) -> None:
        """Stops whatever an earlier deployment left running in ``home``, and removes ``home``."""
        self._script("stop", STOP_SECONDS)
        subprocess.run(["rm", "-rf", str(self.home)], check=True)

    def start(self) -> str:
        """What the script printed (the generated passwords among it) once Airflow answers."""
        started = self._script("start", START_SECONDS)
        if started.returncode != 0:
            raise RuntimeError(f"scripts/airflow.sh start failed:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}")
        return started.stdout

    def stop(self) -> None:
        self._script("stop", STOP_SECONDS)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Airflow's processes stopped in place meanwhile (scripts/airflow.sh pause, then resume)."""
        self._script("pause", STOP_SECONDS)
        try:
            yield
        finally:
            self._script("resume", STOP_SECONDS)

    def passwords(self) -> dict[str, str]:
        """The platform's database users' passwords, as the start generated them (mode 600)."""
        return json.loads((self.home / "passwords.json").read_text())

    def client(self, username: str = "admin") -> AirflowClient:
        return AirflowClient(self.base_url, self.passwords()[username], username)

    def _script(self, command: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW_SCRIPT, command], env=self.env, capture_output=True, text=True, timeout=timeout)
