"""The deployment across hosts, read from its one description (docker/deployment.yaml): each host's
address and the services it runs, the ports each service listens on, and what follows from them,
pure: the names of the namespaces and links that stand for the hosts on one machine
(lakehouse.services.hosts), each host's ``/etc/hosts``, the settings that point a client at the
services, and the containers of docker/compose.yaml that stand for the same hosts."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import LOOPBACK
from lakehouse.vocabulary import DeployedService, choices

# A link's name holds 15 characters: the prefix, "-v" and up to three digits of the host's address.
MAX_PREFIX = 10
# The settings that point a client at each service, spelled with its host and its named ports.
CLIENT_SETTINGS = {
    DeployedService.S3: ("LAKEHOUSE_S3_ENDPOINT", "http://{host}:{s3}"),
    DeployedService.KAFKA: ("LAKEHOUSE_KAFKA_BOOTSTRAP", "{host}:{broker}"),
    DeployedService.SPARK_MASTER: ("LAKEHOUSE_SPARK_MASTER", "spark://{host}:{master}"),
    DeployedService.SPARK_SERVICE: ("LAKEHOUSE_SQL_ROUTE", "sc://{host}:{connect}"),
    # Prometheus, on another host than the stream, does not see the address the stream writes in its home.
    DeployedService.SPEED_LAYER: ("LAKEHOUSE_PROMETHEUS_STREAM_TARGETS", "{host}:{metrics}"),
    DeployedService.AIRFLOW_METRICS: ("LAKEHOUSE_PROMETHEUS_AIRFLOW_TARGETS", "{host}:{metrics}"),
}
# The settings that give a host's own service its described port, where the one-machine default is
# another: a stream's metrics endpoint takes any free port on one machine, a known one across hosts.
OWN_PORT_SETTINGS = {DeployedService.SPEED_LAYER: ("LAKEHOUSE_METRICS_PORT", "metrics")}
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    address: ipaddress.IPv4Address
    services: tuple[DeployedService, ...]


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The hosts on one private subnet, and the ports of the services they run."""

    prefix: str
    subnet: ipaddress.IPv4Network
    machine: ipaddress.IPv4Address  # the root namespace's address on the subnet (the bridge's)
    ports: Mapping[DeployedService, Mapping[str, int]]
    hosts: tuple[Host, ...]

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise LakehouseError(f"no host {name!r} in the deployment: one of {', '.join(self.host_names())}")

    def host_names(self) -> list[str]:
        return [host.name for host in self.hosts]

    def host_ports(self, host: Host) -> list[int]:
        """Every port the host's services listen on, in order."""
        return sorted(port for service in host.services for port in self.ports[service].values())

    def runs(self, service: DeployedService) -> Host | None:
        """The (first) host that runs ``service``."""
        return next((host for host in self.hosts if service in host.services), None)

    # --- The hosts on one machine: a namespace and a link each, on one bridge ---
    def namespace(self, host: Host) -> str:
        return f"{self.prefix}-{host.name}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def link(self, host: Host) -> str:
        """The root namespace's end of the host's link, named by its address's last number (a host's
        name may be too long for a link's)."""
        return f"{self.prefix}-v{host.address.packed[-1]}"

    def hosts_file(self, host: Host, machine: str) -> str:
        """The ``/etc/hosts`` of ``host``'s namespace: every host by name, and ``machine`` (the name
        processes find as their own, shared by every namespace) at the host's own address."""
        lines = [f"{LOOPBACK}\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{other.address}\t{other.name}" + (f" {machine}" if other == host else "") for other in self.hosts]
        return "\n".join(lines) + "\n"

    # --- What a host is told ---
    def client_environment(self) -> dict[str, str]:
        """The settings that point any host's commands at the deployment's services, by host name."""
        environment = {}
        for service, (variable, spelling) in CLIENT_SETTINGS.items():
            host = self.runs(service)
            if host is not None:
                environment[variable] = spelling.format(host=host.name, **self.ports[service])
        return environment

    def host_environment(self, host: Host) -> dict[str, str]:
        """What ``lakehouse hosts run`` sets for a command on ``host``: the clients' settings, and the
        address its services bind to."""
        own = {
            variable: str(self.ports[service][port])
            for service, (variable, port) in OWN_PORT_SETTINGS.items()
            if service in host.services
        }
        return self.client_environment() | own | {"LAKEHOUSE_BIND_ADDRESS": str(host.address)}

    def compose_services(self) -> dict[str, tuple[Host, DeployedService]]:
        """docker/compose.yaml's long-running containers, by name: a host's first service takes the
        host's name, its others their own (they join the first one's network)."""
        return {name: (host, service) for name, host, service in self._compose_names()}

    def _compose_names(self) -> list[tuple[str, Host, DeployedService]]:
        return [
            (host.name if index == 0 else service.value, host, service)
            for host in self.hosts
            for index, service in enumerate(host.services)
        ]


def load(path: str | Path) -> Deployment:
    """The description at ``path``; a LakehouseError naming the file and field of the first mistake."""
    import yaml

    path = Path(path)
    try:
        description = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise LakehouseError(f"cannot read the deployment {path}: {error}") from None
    try:
        deployment = _parse(description)
    except KeyError as error:
        raise LakehouseError(f"{path}: the field {error} is missing") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise LakehouseError(f"{path}: {error}") from None
    _check(deployment)
    return deployment


def _parse(description: dict) -> Deployment:
    network = description["network"]
    ports = {
        _service(name, "services"): {port_name: int(port) for port_name, port in (named or {}).items()}
        for name, named in description["services"].items()
    }
    hosts = tuple(
        Host(
            name=str(name),
            address=ipaddress.IPv4Address(entry["address"]),
            services=tuple(_service(service, f"hosts.{name}.services") for service in entry.get("services") or ()),
        )
        for name, entry in description["hosts"].items()
    )
    subnet, machine = ipaddress.IPv4Network(network["subnet"]), ipaddress.IPv4Address(network["machine"])
    return Deployment(str(network["prefix"]), subnet, machine, ports, hosts)


def _service(name: str, field: str) -> DeployedService:
    if name not in choices(DeployedService):
        raise ValueError(f"{field}: no service {name!r}; one of {', '.join(choices(DeployedService))}")
    return DeployedService(name)


def _check(deployment: Deployment) -> None:
    """Names that fit a link's, every address its own on the subnet, every service's ports given."""
    if not _NAME.match(deployment.prefix) or len(deployment.prefix) > MAX_PREFIX:
        raise LakehouseError(f"network.prefix: lower-case letters, digits and '-', at most {MAX_PREFIX} characters")
    usable = set(deployment.subnet.hosts())
    if deployment.machine not in usable:
        raise LakehouseError(f"network.machine: {deployment.machine} is no host address of {deployment.subnet}")
    seen: dict[ipaddress.IPv4Address, str] = {deployment.machine: "the machine"}
    for host in deployment.hosts:
        if not _NAME.match(host.name):
            raise LakehouseError(f"hosts.{host.name}: a host's name is lower-case letters, digits and '-'")
        if host.address not in usable:
            raise LakehouseError(f"hosts.{host.name}.address: {host.address} is no host address of {deployment.subnet}")
        if host.address in seen:
            raise LakehouseError(f"hosts.{host.name}.address: {host.address} is already {seen[host.address]}'s")
        seen[host.address] = host.name
        missing = [service.value for service in host.services if service not in deployment.ports]
        if missing:
            raise LakehouseError(f"hosts.{host.name}.services: {', '.join(missing)} not under services:")
    _check_compose_names(deployment)
    try:
        deployment.client_environment()
    except KeyError as error:
        raise LakehouseError(f"services: a client needs the port named {error}") from None


def _check_compose_names(deployment: Deployment) -> None:
    """A host's second service is named after itself in compose: it must be the only one of its name."""
    names = [name for name, _, _ in deployment._compose_names()]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise LakehouseError(f"hosts: {', '.join(doubled)} would name two containers of docker/compose.yaml")
