"""A Spark standalone cluster on this machine (``lakehouse cluster start``, ``make cluster``): a master
and two workers, started from pyspark's own ``spark-class`` (pyspark ships no start-master.sh).

Jobs go to it with ``LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:<port>``: the stream, backfills and
corrections, from the CLI, spark-submit or Airflow's ``spark_default`` connection. Each worker
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


def _alive_workers(web_port: int) -> int:
    """Workers the master counts as ALIVE, from its JSON status page (0 if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as response:
            state = json.loads(response.read())
    except (OSError, ValueError):
        return 0
    return sum(worker.get("state") == "ALIVE" for worker in state.get("workers", []))


def status(settings: Settings) -> dict:
    """Whether this home's cluster is up: every process alive and the master counting every worker."""
    files = ClusterFiles(settings.cluster_dir())
    pids, ports = files.pids(), files.ports()
    alive = bool(pids) and all(pid_alive(pid) for pid in pids.values())
    workers = _alive_workers(ports["web"]) if alive and port_answers(ports["master"]) else 0
    report = {"up": alive and workers == WORKERS, "workers": workers, "logs": str(files.folder)}
    if report["up"]:
        report["master"] = f"spark://127.0.0.1:{ports['master']}"
        report["web_ui"] = f"http://127.0.0.1:{ports['web']}"
    return report


def _daemon(files: ClusterFiles, name: str, arguments: list[str]) -> int:
    env = {
        **os.environ,
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOG_DIR": str(files.folder),
    }
    command = [str(Path(spark_home()) / "bin" / "spark-class"), *arguments]
    return detach(command, files.folder / f"{name}.log", env).pid


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
    master_port = settings.cluster_port or free_port()
    refuse_taken(master_port, "set LAKEHOUSE_CLUSTER_PORT")
    ports = {"master": master_port, "web": free_port()}
    files.folder.mkdir(parents=True, exist_ok=True)
    master = "org.apache.spark.deploy.master.Master"
    pids = {"master": _daemon(files, "master", [master, "--host", "127.0.0.1", "--port", str(master_port),
                                                 "--webui-port", str(ports["web"])])}  # fmt: skip
    for number in range(1, WORKERS + 1):
        work = files.folder / f"worker-{number}"
        work.mkdir(exist_ok=True)
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(WORKER_CORES)]
        worker += ["--memory", WORKER_MEMORY, "--webui-port", str(free_port()), "--work-dir", str(work)]
        pids[f"worker-{number}"] = _daemon(files, f"worker-{number}", [*worker, f"spark://127.0.0.1:{master_port}"])
    files.record(pids, ports)
    report = wait_until_up(lambda: status(settings), lambda: all(pid_alive(pid) for pid in pids.values()), wait_seconds)
    if report:
        return report
    stop(settings)
    raise LakehouseError(f"the Spark cluster did not come up within {wait_seconds:.0f} s; see {files.folder}/*.log")


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
