"""What every service of lakehouse.services does the same way: loopback ports, pid files and logs,
starting detached in a process session of its own, waiting until up, and stopping a whole session,
so that no child keeps a port.

A service module has one shape (``Service``): ``start(settings)`` returns its status once up (at
once when it already is), ``status(settings)`` says whether it is up as a JSON-able report, and
``stop(settings)`` says whether anything ran."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

from lakehouse.errors import LakehouseError
from lakehouse.settings import LOOPBACK, Settings


class Service(Protocol):
    """What ``lakehouse serve``, ``kafka``, ``cluster`` and ``s3`` drive: a module of these three."""

    def start(self, settings: Settings) -> dict: ...

    def status(self, settings: Settings) -> dict: ...

    def stop(self, settings: Settings) -> bool: ...


PORT_FILE = "port.json"


def port_answers(port: int, host: str = LOOPBACK) -> bool:
    """Whether something listens on ``port`` at ``host`` (a service's bind address)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.settimeout(1)
        try:
            return probe.connect_ex((host, port)) == 0
        except OSError:  # a host name that does not resolve
            return False


def reports_ready(host: str, port: int) -> bool:
    """Whether the server at ``host:port`` answers its ``/-/ready`` with 200, as Prometheus and
    Alertmanager do once they serve."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/-/ready", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


# The kernel hands out ports of this range to every outgoing connection and to binds of port 0, so a
# port chosen there can be taken by any socket on the machine between its choice and its use (it
# was: a scheduler's health port, during the tens of seconds Airflow takes to start). Below it, only
# a process that picks a port itself can take one.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
CHOSEN_PORTS_FLOOR = 10_000
PORT_CHOICES = 200
_ports = random.SystemRandom()
_handed_out: set[int] = set()


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now at ``host`` (for a port setting of 0), below the kernel's
    ephemeral range and never one this process handed out before; another process may still take
    it first."""
    ceiling = ephemeral_floor()
    for _ in range(PORT_CHOICES if ceiling > CHOSEN_PORTS_FLOOR else 0):
        port = _ports.randrange(CHOSEN_PORTS_FLOOR, ceiling)
        if port not in _handed_out and _bindable(host, port):
            _handed_out.add(port)
            return port
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind((host, 0))  # a machine whose ephemeral range starts low, or a full range below it
        return probe.getsockname()[1]


def ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def refuse_taken(port: int, remedy: str, host: str = LOOPBACK) -> None:
    """Fail before starting when something already listens on ``port`` at ``host``."""
    if port_answers(port, host):
        raise LakehouseError(f"port {port} is taken: stop what listens there or {remedy}")


def saved_port(folder: Path) -> int | None:
    """The port this home's service was set up on (its ``port.json``), if it was."""
    try:
        return int((read_json(folder / PORT_FILE) or {})["port"])
    except (ValueError, KeyError, TypeError):
        return None


def claim_port(folder: Path, configured: int | None, setting: str, service: str, host: str = LOOPBACK) -> int:
    """The port a home's service listens on, kept across restarts (clients of the home have it):
    the one it was set up on, else the configured one, else a free one. A configured port other
    than the set-up one is refused, as is a port something else listens on.

    Args:
        folder: the service's folder in the home, where ``port.json`` is kept.
        configured: the port the settings name (None or 0: any).
        setting: the variable that names it, for the refusal's remedy.
        service: what the service is called in messages.
        host: the address it binds to (LAKEHOUSE_BIND_ADDRESS).
    """
    port = saved_port(folder) or configured or free_port(host)
    if configured and configured != port:
        raise LakehouseError(f"this home's {service} was set up on port {port}: set {setting}={port}")
    refuse_taken(port, "choose another home", host)
    write_json(folder / PORT_FILE, {"port": port})
    return port


def read_json(path: Path):
    """A service's record (ports, pids, state, a JAR list): None when missing, or half-written by a crash."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_json(path: Path, record: dict | list) -> None:
    """Whole or not at all: a reader polling the file never sees half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record))
    os.replace(partial, path)


def detach(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Run ``command`` in its own process session (so that a stop can end it with its children),
    its output appended to ``log``."""
    with log.open("ab") as output:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )


def pid_alive(pid: int | None) -> bool:
    """Whether the process is there and has not ended: a zombie (ended, its exit status not yet
    collected by whichever process inherited it) is no running service, and a start must not wait
    for its reaping."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def session_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap the leader when this process started it (tests do)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_session(pid: int, grace_seconds: float) -> None:
    """TERM the session's leader, so that it stops cleanly, then KILL the whole session (leader and
    children, a JVM say) if anything of it is still there after ``grace_seconds``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while session_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if session_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while session_alive(pid):
            time.sleep(0.2)


def wait_until_up(status: Callable[[], dict], alive: Callable[[], bool], seconds: float) -> dict | None:
    """Poll ``status`` until its report says ``up``; None once ``alive`` says the processes have
    ended, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = status()
        if report["up"]:
            return report
        if not alive():
            return None
        time.sleep(0.5)
    return None


@dataclasses.dataclass(frozen=True)
class Detached:
    """One detached service process of a home: its pid file and its log."""

    label: str  # "Kafka broker", "S3 server", "service": for messages
    pid_file: Path
    log: Path

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def report(self, answering: Callable[[], bool]) -> dict:
        """The status of a single-process service: up when its process is alive and ``answering``
        says its ports answer (asked only then); the service adds its addresses when up."""
        pid = self.pid()
        alive = pid_alive(pid)
        return {"up": alive and answering(), "pid": pid if alive else None, "log": str(self.log)}

    def refuse_if_running(self, stop_command: str) -> None:
        """Fail when a process of this service is still there (starting, or stuck) but not up."""
        if pid_alive(self.pid()):
            raise LakehouseError(f"a {self.label} is starting or stuck (pid {self.pid()}): `{stop_command}` first")

    def launch(self, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """``command`` detached, its output to the log, its pid in the pid file from the start."""
        process = detach(command, self.log, env)
        self.pid_file.write_text(str(process.pid))
        return process

    def start(self, command: list[str], status: Callable[[], dict], wait_seconds: float) -> dict:
        """Launch ``command`` and return ``status`` once it says up; stops it and fails with the
        log's path if it exits or does not come up."""
        process = self.launch(command)
        report = wait_until_up(status, lambda: process.poll() is None, wait_seconds)
        if report:
            return report
        code = process.poll()
        self.stop(grace_seconds=5)
        happened = (
            f"exited while starting (code {code})" if code is not None else f"did not answer in {wait_seconds:.0f} s"
        )
        raise LakehouseError(f"the {self.label} {happened}; see {self.log}")

    def stop(self, grace_seconds: float) -> bool:
        """TERM the process session, KILL it after ``grace_seconds``; False if none ran."""
        pid = self.pid()
        running = pid_alive(pid)
        if running:
            stop_session(pid, grace_seconds)
        self.pid_file.unlink(missing_ok=True)
        return running


@dataclasses.dataclass(frozen=True)
class ServerFolder:
    """A single-process server's folder in the home: the port it was set up on (``port.json``), and
    its pid file and log, named after the server. A server's own files subclass it."""

    label: ClassVar[str]  # what messages call the server
    stem: ClassVar[str]  # its pid file's and log's name

    folder: Path

    @property
    def process(self) -> Detached:
        return Detached(self.label, self.folder / f"{self.stem}.pid", self.folder / f"{self.stem}.log")

    def port(self) -> int | None:
        return saved_port(self.folder)

    def ready_report(self, host: str) -> dict:
        """The status of a server that says when it serves at ``/-/ready`` (Prometheus, Alertmanager):
        its process alive and ready on the port it was set up on, and its URL when up."""
        port = self.port()
        report = self.process.report(
            lambda: port is not None and port_answers(port, host) and reports_ready(host, port)
        )
        if report["up"]:
            report["url"] = f"http://{host}:{port}"
        return report


def web_command(binary: str, config: Path, host: str, port: int) -> list[str]:
    """The command line Prometheus and Alertmanager share: the configuration, the address to listen on,
    and the one their links name (an alert's generatorURL; by default the machine's name, which may
    not resolve to the bind address).

    Args:
        binary: the server's executable.
        config: its configuration file.
        host: the address it listens on (LAKEHOUSE_BIND_ADDRESS).
        port: its port.
    """
    address = f"{host}:{port}"
    return [
        binary,
        f"--config.file={config}",
        f"--web.listen-address={address}",
        f"--web.external-url=http://{address}",
    ]
