"""A Spark standalone cluster on this machine (``lakehouse cluster start``, ``make cluster``): a master
and two workers, started from pyspark's own ``spark-class`` (pyspark ships no start-master.sh).

Jobs go to it with ``LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:<port>``: the stream, backfills and
corrections, from the CLI, spark-submit or Airflow's ``spark_default`` connection. Its daemons bind to
LAKEHOUSE_BIND_ADDRESS (loopback unless a deployment across hosts gives a host's address). Each worker
offers one core and a small memory, so that four JVMs (master, workers, driver) and the executors
fit on a two-core machine. Files live in the home's ``cluster/`` folder; each process runs in its
own session, and a stop ends them all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.request
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services.process import (
    detach,
    free_port,
    pid_alive,
    port_answers,
    read_json,
    refuse_taken,
    stop_session,
    wait_until_up,
    write_json,
)
from lakehouse.settings import Settings

WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "2g"
# The master and worker daemons themselves need little: their executors are separate JVMs.
DAEMON_MEMORY = "256m"
START_SECONDS = 120
STOP_SECONDS = 30


def spark_home() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


@dataclasses.dataclass(frozen=True)
class ClusterFiles:
    folder: Path

    def pids(self) -> dict[str, int]:
        return read_json(self.folder / "pids.json") or {}

    def ports(self) -> dict[str, int]:
        return read_json(self.folder / "ports.json") or {}

    def record(self, pids: dict[str, int], ports: dict[str, int]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / "pids.json", pids)
        write_json(self.folder / "ports.json", ports)

    def clear(self) -> None:
        (self.folder / "pids.json").unlink(missing_ok=True)


def _alive_workers(host: str, web_port: int) -> int:
    """Workers the master counts as ALIVE, from its JSON status page (0 if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{web_port}/json/", timeout=5) as response:
            state = json.loads(response.read())
    except (OSError, ValueError):
        return 0
    return sum(worker.get("state") == "ALIVE" for worker in state.get("workers", []))


def status(settings: Settings) -> dict:
    """Whether this home's cluster is up: every process alive and the master counting every worker."""
    files = ClusterFiles(settings.cluster_dir())
    pids, ports, host = files.pids(), files.ports(), settings.bind_address
    alive = bool(pids) and all(pid_alive(pid) for pid in pids.values())
    workers = _alive_workers(host, ports["web"]) if alive and port_answers(ports["master"], host) else 0
    report = {"up": alive and workers == WORKERS, "workers": workers, "logs": str(files.folder)}
    if report["up"]:
        report["master"] = f"spark://{host}:{ports['master']}"
        report["web_ui"] = f"http://{host}:{ports['web']}"
    return report


def daemon_environment(folder: Path, host: str) -> dict[str, str]:
    """A daemon's environment: pyspark's Spark, bound to ``host``, small, logging into ``folder``."""
    return {
        **os.environ,
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": host,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOG_DIR": str(folder),
    }


def master_arguments(host: str, port: int, web_port: int) -> list[str]:
    return ["org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port), "--webui-port", str(web_port)]


def worker_arguments(host: str, master: str, web_port: int, work: Path) -> list[str]:
    """A worker's arguments to ``spark-class``.

    Args:
        host: the address it binds to.
        master: the master it registers with (``spark://host:port``).
        web_port: its UI's port.
        work: its work folder.
    """
    worker = ["org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", str(WORKER_CORES)]
    return [*worker, "--memory", WORKER_MEMORY, "--webui-port", str(web_port), "--work-dir", str(work), master]


def _daemon(files: ClusterFiles, name: str, arguments: list[str], host: str) -> int:
    command = [str(Path(spark_home()) / "bin" / "spark-class"), *arguments]
    return detach(command, files.folder / f"{name}.log", daemon_environment(files.folder, host)).pid


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start the master and its workers, detached, and return the status once every worker has
    registered."""
    from lakehouse.storage.java import check_java

    already = status(settings)
    if already["up"]:
        return already
    files = ClusterFiles(settings.cluster_dir())
    if any(pid_alive(pid) for pid in files.pids().values()):
        raise LakehouseError("a cluster is starting or stuck: `lakehouse cluster stop` first")
    check_java()
    host = settings.bind_address
    master_port = settings.cluster_port or free_port(host)
    refuse_taken(master_port, "set LAKEHOUSE_CLUSTER_PORT", host)
    files.folder.mkdir(parents=True, exist_ok=True)
    pids, ports = _start_daemons(files, host, master_port)
    files.record(pids, ports)
    report = wait_until_up(lambda: status(settings), lambda: all(pid_alive(pid) for pid in pids.values()), wait_seconds)
    if report:
        return report
    stop(settings)
    raise LakehouseError(f"the Spark cluster did not come up within {wait_seconds:.0f} s; see {files.folder}/*.log")


def _start_daemons(files: ClusterFiles, host: str, master_port: int) -> tuple[dict[str, int], dict[str, int]]:
    """The master and its workers, each bound to ``host``: their pids and the master's ports."""
    ports = {"master": master_port, "web": free_port(host)}
    pids = {"master": _daemon(files, "master", master_arguments(host, master_port, ports["web"]), host)}
    for number in range(1, WORKERS + 1):
        work = files.folder / f"worker-{number}"
        work.mkdir(exist_ok=True)
        worker = worker_arguments(host, f"spark://{host}:{master_port}", free_port(host), work)
        pids[f"worker-{number}"] = _daemon(files, f"worker-{number}", worker, host)
    return pids, ports


def stop(settings: Settings) -> bool:
    """Stop the workers, then the master. False if none ran."""
    files = ClusterFiles(settings.cluster_dir())
    pids = files.pids()
    running = [pid for pid in pids.values() if pid_alive(pid)]
    for name in sorted(pids, key=lambda n: n == "master"):  # the workers first
        if pid_alive(pids[name]):
            stop_session(pids[name], STOP_SECONDS)
    files.clear()
    return bool(running)
