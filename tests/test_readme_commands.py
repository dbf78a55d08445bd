"""The README's commands, as a newcomer runs them: in a copy of the checkout, from a shell that has
none of our variables (``env -i`` with only PATH and HOME), so a script that silently depends on a
``LAKEHOUSE_*`` or ``AIRFLOW_*`` variable fails here and not on a newcomer's machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse.demo import DEMO_MARKER
from tests.airflow_env import PROJECT

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.services]
README = (PROJECT / "README.md").read_text()
AIRFLOW_DOC = (PROJECT / "docs" / "airflow.md").read_text()
# The ports `make airflow` uses when nothing is set: the README's http://127.0.0.1:8080, PostgreSQL's,
# the scheduler's health check's and the StatsD exporter's metrics (its datagrams come on UDP 8125).
DEFAULT_PORTS = (8080, 54329, 8974, 9102)


def documented(command: str, text: str = README) -> str:
    """The command, after checking that the documentation still tells the reader to run it."""
    assert re.search(rf"^{re.escape(command)}(\s|$)", text, re.MULTILINE), f"not documented any more: {command}"
    return command


def port_is_free(port: int) -> bool:
    """Nothing listens on the port: a server could bind it now. SO_REUSEADDR as servers set it, so that
    connections the stopped server closed (TIME_WAIT on its port for a minute) do not count."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def checkout() -> Iterator[Path]:
    """A copy of the checkout's files, sharing its installed .venv and its cached JARs (the README's
    `make` finds them up to date), but with its own .lakehouse and .cache/airflow."""
    # The checkout's own venv up to date first: the copy's `make` must find nothing to install (an
    # install from the copy would point the shared venv's editable lakehouse at it).
    subprocess.run(["make", "-s", "setup"], cwd=PROJECT, check=True, capture_output=True)
    # Outside pytest's temporary root: PostgreSQL runs as its own user and must enter the copy, and
    # every pytest session that starts makes that root private to its owner again (mode 0700).
    root = Path(tempfile.mkdtemp(prefix="lakehouse-newcomer-"))
    copy = root / "lakehouse"
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=PROJECT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = PROJECT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)  # keeps mtimes: make sees the venv as up to date
    (copy / ".venv").symlink_to(PROJECT / ".venv")
    (copy / ".cache").mkdir()
    (copy / ".cache" / "ivy").symlink_to(PROJECT / ".cache" / "ivy")
    # PostgreSQL runs as its own user when the tests run as root: it must be able to enter the copy.
    for folder in (root, copy):
        folder.chmod(0o755)
    yield copy
    shutil.rmtree(root, ignore_errors=True)


def newcomer(checkout: Path, command: str, timeout: int) -> subprocess.CompletedProcess:
    scrubbed = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    return subprocess.run(
        ["env", "-i", *(f"{k}={v}" for k, v in scrubbed.items()), "bash", "-c", command],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_make_demo_then_the_queries_the_readme_suggests(checkout):
    demo = newcomer(checkout, documented("make demo"), timeout=1500)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Done in" in demo.stdout
    assert (checkout / ".lakehouse" / DEMO_MARKER).exists(), "the demo wrote outside the checkout it ran in"
    # The correction runs before the batch layer recomputes the range, so it has served values to
    # retract and recomputed ones to insert, and the demo's query of its log shows both.
    section = demo.stdout.split("== SQL: The correction log", 1)[1].split("\n== ", 1)[0]
    changes = {cell.strip() for line in section.splitlines() for cell in line.split(" | ")}
    assert {"retract", "insert"} <= changes, section
    query = documented('.venv/bin/lakehouse sql "SELECT * FROM gold.toll_traffic ORDER BY window_start LIMIT 10"')
    answer = newcomer(checkout, query.replace('LIMIT 10"', 'LIMIT 10" --format json'), timeout=300)
    assert answer.returncode == 0, answer.stderr[-3000:]
    rows = json.loads(answer.stdout)
    assert len(rows) == 10 and {"window_start", "vehicles", "source"} <= set(rows[0])
    status = newcomer(checkout, documented(".venv/bin/lakehouse status --pipeline toll_traffic"), timeout=300)
    assert status.returncode == 0 and "quarantined" in status.stdout, status.stdout + status.stderr[-3000:]


def test_make_airflow_starts_and_stops_without_any_variable_set(checkout):
    taken = [port for port in DEFAULT_PORTS if not port_is_free(port)]
    assert not taken, f"ports {taken} are taken: `make airflow` uses them by default; stop what holds them"
    try:
        started = newcomer(checkout, documented("make airflow", AIRFLOW_DOC), timeout=900)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        assert "Airflow is up: http://127.0.0.1:8080" in started.stdout
        password = json.loads((checkout / ".cache/airflow/passwords.json").read_text())["admin"]
        assert "Generated admin password (shown once; kept in" in started.stdout and password in started.stdout
    finally:
        stopped = newcomer(checkout, documented("make airflow-stop", AIRFLOW_DOC), timeout=300)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr[-3000:]
    assert all(port_is_free(port) for port in DEFAULT_PORTS)
