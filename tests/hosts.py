"""Helpers for tests of the deployment's hosts on this machine (``lakehouse hosts``): the shipped
description under a prefix and subnet of its own, so that a test leaves alone a deployment made with
``lakehouse hosts up``, and another run beside it; the CLI as root runs it; commands on a host."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lakehouse.services import deployment, hosts
from lakehouse.services.process import pid_alive
from lakehouse.settings import PROJECT_ROOT

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
# Network namespaces and links need root; `lakehouse hosts` runs as root.
NEEDS_ROOT = [
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces and links need root (lakehouse hosts runs as root)"
    ),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2's `ip` is missing"),
]


def unused_subnet() -> int:
    """N of a subnet 10.77.N.0/24 no route of the machine names (the shipped one is N = 0)."""
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    taken = {int(n) for n in re.findall(r"\b10\.77\.(\d+)\.", routes)} | {0}
    return random.Random(os.getpid()).choice([n for n in range(1, 255) if n not in taken])


@contextlib.contextmanager
def own_deployment(folder: Path) -> Iterator[tuple[deployment.Deployment, dict[str, str]]]:
    """The shipped description on a subnet 10.77.N.0/24 of its own, its names starting ``lhtN-``, and
    the environment that names it; taken down whatever happens."""
    number = unused_subnet()
    description = yaml.safe_load((PROJECT_ROOT / "docker" / "deployment.yaml").read_text())
    description["network"] = {
        "prefix": f"lht{number}",
        "subnet": f"10.77.{number}.0/24",
        "machine": f"10.77.{number}.1",
    }
    for entry in description["hosts"].values():
        entry["address"] = entry["address"].replace("10.77.0.", f"10.77.{number}.")
    path = folder / "deployment.yaml"
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    described = deployment.load(path)
    try:
        yield described, {**os.environ, "LAKEHOUSE_DEPLOYMENT": str(path)}
    finally:
        hosts.down(described)


def lakehouse(env: dict[str, str], *arguments: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI as a user runs it; its output once it exited 0."""
    done = subprocess.run([LAKEHOUSE, *arguments], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"lakehouse {' '.join(arguments)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def on_host(described: deployment.Deployment, host: str, *command: str) -> subprocess.CompletedProcess:
    """A command in the host's namespace, without the settings `lakehouse hosts run` gives."""
    namespace = described.namespace(described.host(host))
    return subprocess.run(["ip", "netns", "exec", namespace, *command], capture_output=True, text=True, timeout=30)


def answers(described: deployment.Deployment, host: str, address: str, port: int) -> bool:
    """Whether a TCP connection from the host to address:port is accepted within 2 s (a host cut off
    answers nothing, not even a refusal)."""
    connect = f"exec 3<>/dev/tcp/{address}/{port}"
    return on_host(described, host, "timeout", "2", "bash", "-c", connect).returncode == 0


def running(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, its exit status not yet collected)."""
    return pid_alive(pid)


def leftovers(prefix: str) -> list[str]:
    """Whatever of a deployment is still on the machine: namespaces, links, /etc/netns folders."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = re.findall(rf"\b{prefix}-[\w-]+", namespaces + links)
    return found + [str(path) for path in Path("/etc/netns").glob(f"{prefix}-*")]
