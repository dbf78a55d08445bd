"""Detached local services (the Spark service, the Kafka broker): loopback ports, pid files and
stopping a whole process session, so that no child keeps a port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable


def port_answers(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    """A port nothing listens on now (for a port setting of 0; another process may take it first)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
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
