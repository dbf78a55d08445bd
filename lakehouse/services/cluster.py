"""A Spark standalone cluster (``lakehouse cluster start``, ``make cluster``), started from pyspark's
own ``spark-class`` (pyspark ships no start-master.sh): on this machine a master and two workers
(``--role all``, the default); across hosts the master alone on its host (``--role master``) and a
worker on each worker host (``--role worker``), registered with the master LAKEHOUSE_SPARK_MASTER
names (``lakehouse hosts run`` gives ``spark://spark-master:7077``).

Jobs go to it with ``LAKEHOUSE_SPARK_MASTER=spark://<host>:<port>``: the stream, backfills and
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
from lakehouse.vocabulary import ClusterRole

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


def _state(host: str, web_port: int) -> dict:
    """A daemon's JSON status page ({} if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{web_port}/json/", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return {}


def _alive_workers(host: str, web_port: int) -> int:
    """Workers the master counts as ALIVE, from its status page (0 if it does not answer)."""
    return sum(worker.get("state") == "ALIVE" for worker in _state(host, web_port).get("workers", []))


def role_of(pids: dict[str, int]) -> ClusterRole | None:
    """What a home's cluster runs, from the daemons it started (None: none)."""
    if not pids:
        return None
    if "master" not in pids:
        return ClusterRole.WORKER
    return ClusterRole.ALL if len(pids) > 1 else ClusterRole.MASTER


def status(settings: Settings) -> dict:
    """Whether this home's cluster is up: every process alive, and the master answering and counting
    every worker it started (a master alone: answering; a worker alone: registered with a master)."""
    files = ClusterFiles(settings.cluster_dir())
    pids, ports, host = files.pids(), files.ports(), settings.bind_address
    alive = bool(pids) and all(pid_alive(pid) for pid in pids.values())
    role = role_of(pids)
    if role is ClusterRole.WORKER:
        # A worker learns its master's URL when the master accepts it.
        master = _state(host, ports["web"]).get("masterurl", "") if alive else ""
        report = {"up": bool(master), "role": role.value, "logs": str(files.folder)}
        return report | {"master": master} if master else report
    answering = alive and port_answers(ports["master"], host)
    workers = _alive_workers(host, ports["web"]) if answering else 0
    up = answering and (role is ClusterRole.MASTER or workers == WORKERS)
    report = {"up": up, "role": (role or ClusterRole.ALL).value, "workers": workers, "logs": str(files.folder)}
    if up:
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


def start(settings: Settings, role: ClusterRole = ClusterRole.ALL, wait_seconds: float = START_SECONDS) -> dict:
    """Start the role's daemons detached (a master and its workers, the master alone, or one worker)
    and return the status once they are up: every worker registered."""
    from lakehouse.storage.java import check_java

    already = status(settings)
    if already["up"] and already["role"] != role:
        raise LakehouseError(f"this home runs a cluster's {already['role']}: `lakehouse cluster stop` first")
    if already["up"]:
        return already
    files = ClusterFiles(settings.cluster_dir())
    if any(pid_alive(pid) for pid in files.pids().values()):
        raise LakehouseError("a cluster is starting or stuck: `lakehouse cluster stop` first")
    master = _master_to_join(settings) if role is ClusterRole.WORKER else None
    check_java()
    files.folder.mkdir(parents=True, exist_ok=True)
    if master is None:
        pids, ports = _start_master(files, settings)
        master = f"spark://{settings.bind_address}:{ports['master']}"
    else:
        pids, ports = {}, {}
    for name in [] if role is ClusterRole.MASTER else _worker_names(role):
        pids[name], web_port = _start_worker(files, settings.bind_address, name, master)
        if role is ClusterRole.WORKER:
            ports["web"] = web_port  # a worker alone is found by its own status page
    files.record(pids, ports)
    report = wait_until_up(lambda: status(settings), lambda: all(pid_alive(pid) for pid in pids.values()), wait_seconds)
    if report:
        return report
    stop(settings)
    raise LakehouseError(f"the Spark cluster did not come up within {wait_seconds:.0f} s; see {files.folder}/*.log")


def _master_to_join(settings: Settings) -> str:
    """The master a worker alone registers with: LAKEHOUSE_SPARK_MASTER's."""
    if not settings.spark_master.startswith("spark://"):
        raise LakehouseError(
            "a worker registers with a master: set LAKEHOUSE_SPARK_MASTER=spark://HOST:PORT, not "
            f"{settings.spark_master!r} (`lakehouse hosts run` gives the deployment's)"
        )
    return settings.spark_master


def _worker_names(role: ClusterRole) -> list[str]:
    """The workers' names, of their logs and work folders: numbered beside their master, else one."""
    return [f"worker-{number}" for number in range(1, WORKERS + 1)] if role is ClusterRole.ALL else ["worker"]


def _start_master(files: ClusterFiles, settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """The master, bound to the bind address: its pid and ports (its own and its UI's)."""
    host = settings.bind_address
    master_port = settings.cluster_port or free_port(host)
    refuse_taken(master_port, "set LAKEHOUSE_CLUSTER_PORT", host)
    ports = {"master": master_port, "web": free_port(host)}
    return {"master": _daemon(files, "master", master_arguments(host, master_port, ports["web"]), host)}, ports


def _start_worker(files: ClusterFiles, host: str, name: str, master: str) -> tuple[int, int]:
    """A worker bound to ``host``, registering with ``master``: its pid and its UI's port."""
    work = files.folder / name
    work.mkdir(exist_ok=True)
    web_port = free_port(host)
    return _daemon(files, name, worker_arguments(host, master, web_port, work), host), web_port


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
