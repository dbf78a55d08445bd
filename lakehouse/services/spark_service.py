"""Starting, checking and stopping the Spark service (``lakehouse serve``; its driver is
lakehouse.serving.server, which reads and writes its files through ``ServiceState``).

The service runs detached, in its own process session, and keeps its files in the home's
``service/`` folder: ``server.pid`` from the moment it starts, ``state.json`` once both endpoints
answer, and ``server.log``. A stop ends the whole session, so no child keeps a port.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services.certificates import Authority
from lakehouse.services.process import (
    Detached,
    free_port,
    port_answers,
    read_json,
    refuse_taken,
    wait_until_up,
    write_json,
)
from lakehouse.settings import LOOPBACK, TLS_FOLDER, Settings
from lakehouse.vocabulary import SqlRoute

METASTORE_DRIVER = "org.postgresql:postgresql:42.7.14"
START_SECONDS = 300
CLIENT_SECRETS = ("LAKEHOUSE_SQL_PASSWORD", "LAKEHOUSE_SPARK_REMOTE_TOKEN", "SPARK_CONNECT_AUTHENTICATE_TOKEN")
STOP_SECONDS = 60


def delta_class_path(settings: Settings) -> list[str]:
    """Delta's own JARs and the platform's (with Spark's Kafka source, for jobs through the service
    that read a Kafka log), for the driver's class path. Only Delta's of the resolved list: the rest
    brings an older Jackson than Spark's, which breaks Spark when put first."""
    from lakehouse.storage.spark import JarCache, platform_jars, spark_packages

    jars = JarCache(settings.ivy_dir, spark_packages() + list(settings.extra_packages)).cached_jars() or []
    delta = [jar for jar in jars if Path(jar).name.startswith(("io.delta_", "io.unitycatalog_"))]
    if not delta:
        raise LakehouseError("Delta's JARs are not cached yet: run `make setup` first")
    return [*delta, *(jar.removeprefix("local:") for jar in platform_jars(settings))]


def metastore_driver_jar(settings: Settings) -> str:
    from lakehouse.storage.java import maven_central_jar

    return maven_central_jar(METASTORE_DRIVER)


@dataclasses.dataclass(frozen=True)
class ServiceState:
    """The service's files in the home: pid, state and log."""

    folder: Path
    connect_port: int
    thrift_port: int
    host: str = LOOPBACK  # the address both endpoints bind to (LAKEHOUSE_BIND_ADDRESS)

    @classmethod
    def of(cls, settings: Settings) -> ServiceState:
        return cls(settings.service_dir(), settings.connect_port, settings.thrift_port, settings.bind_address)

    @property
    def process(self) -> Detached:
        # "a service is starting or stuck": the words of its refusal to start twice.
        return Detached("service", self.folder / "server.pid", self.log)

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    @property
    def authority(self) -> Authority:
        """The authority that signs the Thrift endpoint's certificate; JDBC clients trust it alone."""
        return Authority(self.folder / TLS_FOLDER)

    def write_ready(self, pid: int, tables: list[str]) -> None:
        ports = {"connect_port": self.connect_port, "thrift_port": self.thrift_port}
        state = {"pid": pid, "host": self.host, **ports, "tables": tables}
        write_json(self.folder / "state.json", state)

    def ready(self) -> dict | None:
        return read_json(self.folder / "state.json")

    def clear(self) -> None:
        for name in ("state.json", "server.pid"):
            (self.folder / name).unlink(missing_ok=True)


def jdbc_url(host: str, port: int, trust_store: Path) -> str:
    """The Thrift endpoint's JDBC URL: over TLS, the server's certificate checked against the trust
    store (the service's authority) and its name against ``host``, as the Hive JDBC driver does."""
    return f"jdbc:hive2://{host}:{port}/default;ssl=true;sslTrustStore={trust_store}"


def endpoints(state: dict, trust_store: Path) -> dict[str, str]:
    host = state.get("host", LOOPBACK)  # a state written before the address was a setting: loopback
    return {
        "connect": f"sc://{host}:{state['connect_port']}",
        "jdbc": jdbc_url(host, state["thrift_port"], trust_store),
    }


def status(settings: Settings) -> dict:
    """Whether this home's service is up: its process alive, its state ready, both ports answering."""
    files = ServiceState.of(settings)
    ready = files.ready()
    report = files.process.report(
        lambda: (
            bool(ready)
            and all(port_answers(ready[k], ready.get("host", LOOPBACK)) for k in ("connect_port", "thrift_port"))
        )
    )
    if report["up"]:
        report |= endpoints(ready, files.authority.trust_store) | {"tables": len(ready["tables"])}
        report["catalog"] = "metastore" if settings.metastore_url else "in memory"
    return report


def connect_url(settings: Settings) -> str | None:
    """Where ``lakehouse sql`` sends statements: the service's Spark Connect URL, or None (embedded)."""
    if settings.sql_route == SqlRoute.EMBEDDED:
        return None
    if settings.sql_route != SqlRoute.AUTO:
        return settings.sql_route
    report = status(settings)
    return report["connect"] if report["up"] else None


def _check_can_start(settings: Settings) -> None:
    from lakehouse.storage.java import check_java

    check_java()
    for name, port in (
        ("LAKEHOUSE_CONNECT_PORT", settings.connect_port),
        ("LAKEHOUSE_THRIFT_PORT", settings.thrift_port),
    ):
        refuse_taken(port, f"choose another ({name})", settings.bind_address)
    from pyspark.find_spark_home import _find_spark_home

    jars = Path(_find_spark_home()) / "jars"
    for needed in ("spark-connect_", "spark-hive-thriftserver_"):
        if not any(jars.glob(f"{needed}*.jar")):
            raise LakehouseError(f"pyspark's JARs lack {needed}*.jar in {jars}: reinstall with `make setup`")
    delta_class_path(settings)
    if settings.metastore_url:
        if not settings.metastore_user or not settings.metastore_password:
            raise LakehouseError("LAKEHOUSE_METASTORE_URL is set without LAKEHOUSE_METASTORE_USER and _PASSWORD")
        metastore_driver_jar(settings)


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start the service detached and return its status once both endpoints answer."""
    already = status(settings)
    if already["up"]:
        return already
    files = ServiceState.of(settings)
    files.process.refuse_if_running("lakehouse serve --stop")
    host = settings.bind_address
    settings = settings.replace(
        connect_port=settings.connect_port or free_port(host), thrift_port=settings.thrift_port or free_port(host)
    )
    _check_can_start(settings)
    files.folder.mkdir(parents=True, exist_ok=True)
    files.clear()
    # Its own session, as every service's: a stop ends the driver with its JVM.
    process = files.process.launch([sys.executable, "-m", "lakehouse.serving.server"], _service_environment(settings))
    report = wait_until_up(lambda: status(settings), lambda: process.poll() is None, wait_seconds)
    if report:
        return report
    if process.poll() is not None:
        files.clear()
        raise LakehouseError(f"the Spark service exited while starting (code {process.returncode}); see {files.log}")
    stop(settings)
    raise LakehouseError(f"the Spark service did not answer within {wait_seconds:.0f} s; see {files.log}")


def _service_environment(settings: Settings) -> dict[str, str]:
    """The service reads the same settings as this process, the ports and metastore included; not the
    secrets of a client (lakehouse sql's password, a job's token), which it has no use for."""
    env = {name: value for name, value in os.environ.items() if name not in CLIENT_SECRETS}
    env.update(
        LAKEHOUSE_HOME=settings.home,
        LAKEHOUSE_CONNECT_PORT=str(settings.connect_port),
        LAKEHOUSE_THRIFT_PORT=str(settings.thrift_port),
        # Spark's UI (its metrics servlet) binds to this address, not to every interface.
        SPARK_LOCAL_IP=settings.bind_address,
    )
    return env


def stop(settings: Settings) -> bool:
    """End the service's process session (TERM, then KILL after a minute). False if none ran."""
    files = ServiceState.of(settings)
    # The driver first, so that it stops the endpoints and Spark itself; the rest of its session
    # (the JVM) only if it is still there after a minute.
    running = files.process.stop(STOP_SECONDS)
    files.clear()
    return running
