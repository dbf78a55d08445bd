"""A Kafka broker on loopback for the retained log (``lakehouse kafka start``, ``make kafka``), or on
LAKEHOUSE_BIND_ADDRESS, a host's address in a deployment across hosts.

One JVM is both broker and KRaft controller, as in Kafka's own quick start; its JARs come from
Maven Central through the Ivy that pyspark ships, into the ignored ``.cache/kafka/``. The broker
keeps its configuration, data and log in the home's ``kafka/`` folder, so a restart finds its
topics and offsets again. It runs detached in its own process session; a stop ends the session.
"""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import uuid
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services import kafka_access
from lakehouse.services.certificates import Authority
from lakehouse.services.process import Detached, free_port, port_answers, read_json, refuse_taken, write_json
from lakehouse.settings import KAFKA_CREDENTIALS, LOOPBACK, PROJECT_ROOT, TLS_FOLDER, Settings
from lakehouse.storage import kafka_auth

KAFKA_VERSION = "4.1.1"
KAFKA_JARS = PROJECT_ROOT / ".cache" / "kafka" / KAFKA_VERSION
START_SECONDS = 120
STOP_SECONDS = 30
# Small on purpose: the broker shares two cores and the memory with Spark's JVMs.
BROKER_HEAP = "-Xms128m -Xmx512m"
# The listener clients reach, named after its protocol: SASL logins over TLS. The controller's
# listener stays without TLS: only the broker itself, in the same process, connects to it.
CLIENT_LISTENER = kafka_auth.PROTOCOL


def broker_jars() -> list[str]:
    """The broker's class path, resolved from Maven Central once (about 40 JARs, 40 MB). Some of its
    dependencies (scala-logging) are published as OSGi bundles: those are JARs too."""
    manifest = KAFKA_JARS / "manifest.json"
    jars = read_json(manifest)
    if jars and all(Path(jar).is_file() for jar in jars):
        return jars
    from pyspark.find_spark_home import _find_spark_home

    ivy = next((Path(_find_spark_home()) / "jars").glob("ivy-*.jar"), None)
    if ivy is None:
        raise LakehouseError("pyspark's Ivy JAR is missing: reinstall with `make setup`")
    retrieve = f"{KAFKA_JARS}/jars/[organisation]_[artifact]-[revision](-[classifier]).[ext]"
    command = ["java", "-jar", str(ivy), "-dependency", "org.apache.kafka", "kafka_2.13", KAFKA_VERSION]
    command += [
        "-confs",
        "default",
        "-types",
        "jar",
        "bundle",
        "-cache",
        str(KAFKA_JARS / "ivy"),
        "-retrieve",
        retrieve,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    jars = sorted(str(jar) for jar in (KAFKA_JARS / "jars").glob("*.jar"))
    if done.returncode != 0 or not jars:
        raise LakehouseError(
            f"could not resolve Kafka {KAFKA_VERSION}'s JARs from Maven Central: {done.stdout[-1500:]}{done.stderr}"
        )
    write_json(manifest, jars)
    return jars


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's own form).

    One id in 64 would start with "-", which the storage tool's argument parser reads as an option;
    Kafka's own `Uuid.randomUuid` draws again in that case, and so does this.
    """
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


@dataclasses.dataclass(frozen=True)
class BrokerFiles:
    """The broker's files in the home: configuration, ports, pid, data and log."""

    folder: Path

    @property
    def process(self) -> Detached:
        return Detached("Kafka broker", self.folder / "broker.pid", self.folder / "broker.log")

    @property
    def properties(self) -> Path:
        return self.folder / "server.properties"

    def ports(self) -> dict | None:
        """The address and ports chosen when the storage was formatted: KRaft records the controller's."""
        return read_json(self.folder / "ports.json")

    def host(self) -> str:
        """The address the broker was set up on (a home set up before there was a choice: loopback)."""
        return (self.ports() or {}).get("host", LOOPBACK)

    @property
    def credentials(self) -> Path:
        return self.folder / KAFKA_CREDENTIALS

    def admin_password(self) -> str:
        """The admin's password: generated once with the other principals' (lakehouse.storage.kafka_auth)."""
        return kafka_access.ensure_passwords(self.credentials, [kafka_auth.ADMIN])[kafka_auth.ADMIN]

    @property
    def authority(self) -> Authority:
        return Authority(self.folder / TLS_FOLDER)

    def tls(self, host: str) -> dict[str, str]:
        """The client listener's key and certificate (issued for ``host`` and its names by the home's
        authority, once), and the authority the broker's own connections to it check."""
        pem = self.authority.folder / "broker.pem"
        if not pem.is_file():
            self.authority.issue(pem, host)
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.authority.certificate),
        }

    def write_configuration(self, host: str, port: int, controller_port: int) -> None:
        data = self.folder / "data"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
            "listeners": f"{CLIENT_LISTENER}://{host}:{port},CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": f"{CLIENT_LISTENER}://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"{CLIENT_LISTENER}:{kafka_auth.PROTOCOL},CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": CLIENT_LISTENER,
            **_security(self.admin_password()),
            **self.tls(host),
            "log.dirs": str(data),
            # One broker: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Topics are the platform's: one per pipeline, made with their retention (kafka_log).
            "auto.create.topics.enable": "false",
        }
        self.properties.touch(mode=0o600)  # it holds the admin's password
        self.properties.chmod(0o600)
        self.properties.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        write_json(self.folder / "ports.json", {"host": host, "port": port, "controller_port": controller_port})


def _security(admin_password: str) -> dict[str, str]:
    """Clients authenticate with SCRAM-SHA-512 and get what the ACLs grant them, nothing by default.
    The broker reaches its own controller as the admin through PLAIN, the mechanism KRaft's controller
    listener takes (SCRAM's credentials live in the metadata that listener serves)."""
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    login = f'username="{kafka_auth.ADMIN}" password="{admin_password}"'
    return {
        "sasl.enabled.mechanisms": kafka_auth.MECHANISM,
        "sasl.mechanism.inter.broker.protocol": kafka_auth.MECHANISM,
        f"listener.name.{CLIENT_LISTENER.lower()}.scram-sha-512.sasl.jaas.config": kafka_auth.jaas(
            kafka_auth.ADMIN, admin_password
        ),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{plain} required {login} user_{kafka_auth.ADMIN}="{admin_password}";'
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{kafka_auth.ADMIN}",
    }


def status(settings: Settings) -> dict:
    """Whether this home's broker is up: its process alive and its port answering."""
    files = BrokerFiles(settings.kafka_dir())
    ports, host = files.ports() or {}, files.host()
    report = files.process.report(lambda: bool(ports) and port_answers(ports["port"], host))
    if report["up"]:
        report["bootstrap"] = f"{host}:{ports['port']}"
    return report


def _java(jars: list[str], *arguments: str) -> list[str]:
    return ["java", *BROKER_HEAP.split(), "-cp", ":".join(jars), *arguments]


def _format_storage(files: BrokerFiles, settings: Settings, jars: list[str]) -> None:
    host = settings.bind_address
    port = settings.kafka_port or free_port(host)
    files.folder.mkdir(parents=True, exist_ok=True)
    files.write_configuration(host, port, free_port(host))
    admin = f"{kafka_auth.MECHANISM}=[name={kafka_auth.ADMIN},password={files.admin_password()}]"
    arguments = [
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "-t",
        new_cluster_id(),
        "-c",
        str(files.properties),
    ]
    # The admin's SCRAM credential goes into the metadata at format time, its password through a Java
    # argument file (readable by its owner only, removed after) rather than on the command line.
    argument_file = files.folder / "format.args"
    argument_file.touch(mode=0o600)
    argument_file.write_text("\n".join(f'"{argument}"' for argument in [*arguments, "--add-scram", admin]))
    try:
        done = subprocess.run(_java(jars, f"@{argument_file}"), capture_output=True, text=True)
    finally:
        argument_file.unlink()
    if done.returncode != 0:
        raise LakehouseError(f"Kafka's storage format failed: {(done.stderr or done.stdout).strip()[-1500:]}")


def start(settings: Settings, wait_seconds: float = START_SECONDS) -> dict:
    """Start the broker detached (formatting its storage the first time) and return its status once
    its port answers."""
    from lakehouse.storage.java import check_java

    files = BrokerFiles(settings.kafka_dir())
    _refuse_unauthenticated(files)
    already = status(settings)
    if already["up"]:
        return _granted(settings, already)
    files.process.refuse_if_running("lakehouse kafka stop")
    if files.ports() is not None and settings.bind_address != files.host():
        raise LakehouseError(
            f"this home's broker was set up on {files.host()}: set LAKEHOUSE_BIND_ADDRESS={files.host()}"
        )
    check_java()
    jars = broker_jars()
    if files.ports() is None or not (files.folder / "data" / "meta.properties").is_file():
        _format_storage(files, settings, jars)
    port, host = files.ports()["port"], files.host()
    # Written again at each start: a home set up before TLS takes its clients over TLS from now on.
    files.write_configuration(host, port, files.ports()["controller_port"])
    if settings.kafka_port and settings.kafka_port != port:
        raise LakehouseError(f"this home's broker was set up on port {port}: set LAKEHOUSE_KAFKA_PORT={port}")
    for taken in (port, files.ports()["controller_port"]):
        refuse_taken(taken, "choose another home", host)
    command = _java(jars, f"-Dkafka.logs.dir={files.folder}", "kafka.Kafka", str(files.properties))
    return _granted(settings, files.process.start(command, lambda: status(settings), wait_seconds))


def _refuse_unauthenticated(files: BrokerFiles) -> None:
    """A home whose broker was formatted before clients authenticated has no admin credential in its
    metadata, which only a format adds: it cannot be given logins in place."""
    if files.properties.is_file() and "authorizer.class.name" not in files.properties.read_text():
        raise LakehouseError(
            f"this home's broker ({files.folder}) lets any client in: stop it (`lakehouse kafka stop`), archive its "
            f"topics (`lakehouse archive`) and remove {files.folder}; the next start sets it up with logins and ACLs"
        )


def _granted(settings: Settings, report: dict) -> dict:
    """The status, once the principals and topics of the settings' prefix are set up, with what a
    client needs: the credentials file and each role's principal (never a password)."""
    return {**report, **kafka_access.grant(settings, report["bootstrap"])}


def stop(settings: Settings) -> bool:
    """Stop the broker (TERM, so that it closes its logs cleanly; KILL after 30 s). False if none ran."""
    return BrokerFiles(settings.kafka_dir()).process.stop(STOP_SECONDS)
