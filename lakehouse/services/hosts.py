"""The deployment's hosts on this machine (``lakehouse hosts up|status|down|run|cut``): a network namespace
per host of docker/deployment.yaml, each with one end of a veth pair whose other end is on a bridge
in the root namespace, its address on the deployment's subnet, ``lo`` up, and an ``/etc/hosts`` that
names every host (``/etc/netns/<namespace>/hosts``, which ``ip netns exec`` mounts over
``/etc/hosts``). The bridge has the machine's address on the subnet, so that traffic to the hosts
stays on the machine (without it, the default route would send it out) and an operator reaches
them from it. The hosts have no route beyond the subnet: they reach each other and the machine only.
A command runs on a host through ``ip netns exec``, told the host's address to bind to
(LAKEHOUSE_BIND_ADDRESS) and the services' addresses by host name.

Every namespace and link is named with the deployment's prefix, so that ``down`` removes exactly
what ``up`` made: first the processes still in each namespace (TERM, then KILL), then the
namespaces, their files under ``/etc/netns`` and the links. Both may run any number of times.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.services.deployment import Deployment, Host

NETNS_FILES = Path("/etc/netns")
# Inside each namespace, the host's end of its link.
INTERFACE = "eth0"
STOP_SECONDS = 10
KILL_SECONDS = 5
# A locally administered hardware address no link of the deployment has: frames to it reach no one.
NOWHERE = "02:00:00:00:00:01"


def _ip(*arguments: str) -> str:
    """``ip`` with ``arguments``; its output, or a LakehouseError with its message."""
    try:
        done = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise LakehouseError("`ip` is missing: install iproute2") from None
    if done.returncode != 0:
        raise LakehouseError(f"ip {' '.join(arguments)}: {done.stderr.strip()}")
    return done.stdout


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LakehouseError("lakehouse hosts makes network namespaces and links: run it as root (sudo)")


def _namespaces() -> set[str]:
    return {entry["name"] for entry in json.loads(_ip("-json", "netns", "list") or "[]")}


def _links() -> set[str]:
    """The links of the root namespace, by name."""
    return {entry["ifname"] for entry in json.loads(_ip("-json", "link", "show") or "[]")}


def _pids(namespace: str) -> list[int]:
    return [int(pid) for pid in _ip("netns", "pids", namespace).split()]


def up(deployment: Deployment) -> dict:
    """Make every host that is not there yet (and set the rest as described); the status."""
    _require_root()
    if deployment.bridge not in _links():
        _ip("link", "add", deployment.bridge, "type", "bridge")
    _ip("address", "replace", f"{deployment.machine}/{deployment.subnet.prefixlen}", "dev", deployment.bridge)
    _ip("link", "set", deployment.bridge, "up")
    namespaces, links, machine = _namespaces(), _links(), socket.gethostname()
    for host in deployment.hosts:
        namespace = deployment.namespace(host)
        if namespace not in namespaces:
            _ip("netns", "add", namespace)
        if deployment.link(host) not in links:
            _ip("link", "add", deployment.link(host), "type", "veth", "peer", "name", INTERFACE, "netns", namespace)
        _connect(deployment, host)
        files = NETNS_FILES / namespace
        files.mkdir(parents=True, exist_ok=True)
        (files / "hosts").write_text(deployment.hosts_file(host, machine))
    return status(deployment)


def _connect(deployment: Deployment, host: Host) -> None:
    """The host's link on the bridge and up, its address on its end, and its loopback up."""
    namespace = deployment.namespace(host)
    _ip("link", "set", deployment.link(host), "master", deployment.bridge, "up")
    address = f"{host.address}/{deployment.subnet.prefixlen}"
    _ip("-n", namespace, "address", "replace", address, "dev", INTERFACE)
    _ip("-n", namespace, "link", "set", INTERFACE, "up")
    _ip("-n", namespace, "link", "set", "lo", "up")


def status(deployment: Deployment) -> dict:
    """Each host's namespace, address and link, and how many processes run in it; up when all are there."""
    _require_root()
    namespaces, links = _namespaces(), _links()
    hosts = {}
    for host in deployment.hosts:
        namespace = deployment.namespace(host)
        there = namespace in namespaces and deployment.link(host) in links
        hosts[host.name] = {"up": there, "address": str(host.address), "namespace": namespace}
        if there:
            hosts[host.name]["processes"] = len(_pids(namespace))
    every = deployment.bridge in links and all(host["up"] for host in hosts.values())
    return {"up": every, "bridge": deployment.bridge, "subnet": str(deployment.subnet), "hosts": hosts}


def down(deployment: Deployment) -> dict:
    """End the processes in the hosts' namespaces, then remove the links, the namespaces and their
    files: what was there, by kind."""
    _require_root()
    _refuse_inside(deployment)
    namespaces = _namespaces() & {deployment.namespace(host) for host in deployment.hosts}
    removed = {"processes": sum(_end_processes(namespace) for namespace in namespaces), "links": 0}
    # The links first: deleting a link's end deletes its other end, in the namespace, at once, while
    # a deleted namespace's links go later, in the kernel's own time.
    links = _links()
    for link in (*(deployment.link(host) for host in deployment.hosts), deployment.bridge):
        if link in links:
            _ip("link", "delete", link)
            removed["links"] += 1
    for namespace in namespaces:
        _ip("netns", "delete", namespace)
    for host in deployment.hosts:
        shutil.rmtree(NETNS_FILES / deployment.namespace(host), ignore_errors=True)
    with contextlib.suppress(OSError):
        NETNS_FILES.rmdir()  # only when empty: made by `up`, or nobody's
    return removed | {"namespaces": len(namespaces)}


def _refuse_inside(deployment: Deployment) -> None:
    """``down`` from a host's own namespace would end itself first."""
    mine = _ip("netns", "identify", str(os.getpid())).strip()
    if mine in {deployment.namespace(host) for host in deployment.hosts}:
        raise LakehouseError(f"this process runs on a host of the deployment ({mine}): run `down` outside it")


def _end_processes(namespace: str) -> int:
    """TERM every process of the namespace, KILL what is left after STOP_SECONDS; how many there were."""
    pids = _pids(namespace)
    count = len(pids)
    for sending, seconds in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, KILL_SECONDS)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sending)
        deadline = time.monotonic() + seconds
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = _pids(namespace)
        if not pids:
            return count
    raise LakehouseError(f"processes {pids} in {namespace} outlived SIGKILL")


def cut(deployment: Deployment, host_name: str | None, seconds: float, apart_from: str | None = None) -> dict:
    """Take the host off the network for ``seconds``, then put it back, as a pulled cable would: its
    link goes down on the bridge's side, so nothing reaches the host and the host reaches nothing
    (its processes run on, and its own loopback answers). With ``apart_from``, only the path between
    the two hosts is lost, as a broken route or firewall rule would lose it: each drops every packet
    it sends the other, in silence, and both reach every other host. The link comes back (or the
    packets flow again) even when the wait is interrupted. What was done, and when.

    Args:
        deployment: the hosts.
        host_name: the host to cut off (None: the usage is the error).
        seconds: how long.
        apart_from: another host: only the path between the two is lost.
    """
    usage = "name the host to cut off: lakehouse hosts cut HOST [--from OTHER] [--seconds N]"
    host = _named_host(deployment, host_name, usage)
    other = None if apart_from is None else deployment.host(apart_from)
    if other == host:
        raise LakehouseError(f"a host is not cut from itself: name another host than {host.name} after --from")
    link = deployment.link(host)
    if link not in _links():
        raise _not_up(host)
    pair = [host] if other is None else [host, other]
    began = time.time()
    with _path_lost(deployment, pair):
        time.sleep(seconds)
    cut = {"host": host.name, "link": link, "cut_at": round(began, 3), "back_at": round(time.time(), 3)}
    return cut if apart_from is None else {**cut, "from": apart_from}


@contextlib.contextmanager
def _path_lost(deployment: Deployment, pair: list[Host]):
    """One host's link down for as long as the block runs; or, for two hosts, each one's packets to
    the other sent to a hardware address no link has (a permanent neighbour entry), which the bridge
    delivers to no one: lost in silence, as on a broken path, with no refusal that would tell the
    sender. Deleting the entries lets each find the other again (ARP)."""
    if len(pair) == 1:
        _ip("link", "set", deployment.link(pair[0]), "down")
        try:
            yield
        finally:
            _ip("link", "set", deployment.link(pair[0]), "up")
        return
    lost = [(deployment.namespace(host), str(other.address)) for host, other in (pair, pair[::-1])]
    try:
        for namespace, address in lost:
            _ip("-n", namespace, "neigh", "replace", address, "lladdr", NOWHERE, "dev", INTERFACE, "nud", "permanent")
        yield
    finally:
        for namespace, address in lost:
            with contextlib.suppress(LakehouseError):  # never made: the first replace failed
                _ip("-n", namespace, "neigh", "del", address, "dev", INTERFACE)


def run(deployment: Deployment, host_name: str | None, command: list[str]) -> None:
    """Replace this process with ``command`` on the host: in its namespace, with its address to bind
    to and the services' addresses in its environment (it exits with the command's code)."""
    usage = "name a host and a command: lakehouse hosts run HOST -- COMMAND [ARGUMENT ...]"
    host = _named_host(deployment, host_name if command else None, usage)
    namespace = deployment.namespace(host)
    if namespace not in _namespaces():
        raise _not_up(host)
    environment = {**os.environ, **deployment.host_environment(host)}
    os.execvpe("ip", ["ip", "netns", "exec", namespace, *command], environment)


def _named_host(deployment: Deployment, host_name: str | None, usage: str) -> Host:
    """The host a command names (``usage`` says how, when it names none), once root is checked."""
    if not host_name:
        raise LakehouseError(usage)
    _require_root()
    return deployment.host(host_name)


def _not_up(host: Host) -> LakehouseError:
    return LakehouseError(f"host {host.name} is not up: `lakehouse hosts up` first")
