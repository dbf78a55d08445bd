"""The deployment's hosts on this machine (``lakehouse hosts``): a network namespace per host of the
description, where the hosts reach each other by name and nothing beyond the subnet; the project's
S3 server started on the storage host binds to that host's address and serves the analyst host, and
answers on no loopback; ``down`` leaves no namespace, link, file or process behind.

The test's deployment is the shipped description under a prefix and subnet of its own, so that it
leaves alone a deployment made with ``lakehouse hosts up``, and another run of this test beside it."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakehouse.services import deployment, hosts
from lakehouse.services.process import port_answers
from lakehouse.settings import PROJECT_ROOT
from lakehouse.storage.object_store import saved_credentials

pytestmark = [
    pytest.mark.services,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces and links need root (lakehouse hosts runs as root)"
    ),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2's `ip` is missing"),
]

LAKEHOUSE = str(Path(sys.executable).with_name("lakehouse"))
# The analyst's client: the project's own S3 client, pointed at the storage host by the settings
# `lakehouse hosts run` gives it.
CLIENT = """
import json
from lakehouse.settings import Settings
from lakehouse.storage import object_store
settings = Settings.from_env()
s3 = object_store.client(settings)
object_store.ensure_bucket(s3, "lake")
s3.put_object(Bucket="lake", Key="across-hosts.txt", Body=b"from the analyst")
keys = [item["Key"] for item in s3.list_objects_v2(Bucket="lake")["Contents"]]
print(json.dumps({"endpoint": settings.s3_endpoint, "keys": keys}))
"""


def unused_subnet() -> int:
    """N of a subnet 10.77.N.0/24 no route of the machine names (the shipped one is N = 0)."""
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    taken = {int(n) for n in re.findall(r"\b10\.77\.(\d+)\.", routes)} | {0}
    return random.Random(os.getpid()).choice([n for n in range(1, 255) if n not in taken])


@pytest.fixture
def deployed(tmp_path):
    """The shipped description on a subnet 10.77.N.0/24 of its own, its names starting ``lhtN-``;
    taken down whatever happens."""
    number = unused_subnet()
    description = yaml.safe_load((PROJECT_ROOT / "docker" / "deployment.yaml").read_text())
    description["network"] = {
        "prefix": f"lht{number}",
        "subnet": f"10.77.{number}.0/24",
        "machine": f"10.77.{number}.1",
    }
    for entry in description["hosts"].values():
        entry["address"] = entry["address"].replace("10.77.0.", f"10.77.{number}.")
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(description, sort_keys=False))
    described = deployment.load(path)
    try:
        yield described, {**os.environ, "LAKEHOUSE_DEPLOYMENT": str(path)}
    finally:
        hosts.down(described)


def lakehouse(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess:
    done = subprocess.run([LAKEHOUSE, *arguments], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"lakehouse {' '.join(arguments)}: {done.stderr[-2000:]}"
    return done


def on_host(described: deployment.Deployment, host: str, *command: str) -> subprocess.CompletedProcess:
    namespace = described.namespace(described.host(host))
    return subprocess.run(["ip", "netns", "exec", namespace, *command], capture_output=True, text=True, timeout=30)


def running(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, its exit status not yet collected)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def leftovers(prefix: str) -> list[str]:
    """Whatever of a deployment is still on the machine: namespaces, links, /etc/netns folders."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = re.findall(rf"\b{prefix}-[\w-]+", namespaces + links)
    return found + [str(path) for path in Path("/etc/netns").glob(f"{prefix}-*")]


def test_hosts_reach_each_other_by_name_the_s3_server_serves_across_them_and_down_leaves_nothing(deployed, tmp_path):
    from lakehouse.services.s3 import S3PROXY
    from lakehouse.storage.java import maven_central_jar

    described, env = deployed
    maven_central_jar(S3PROXY)  # the hosts have no route beyond their subnet: fetched here, once
    for _ in range(2):  # up twice: the second finds everything there
        assert json.loads(lakehouse(env, "hosts", "up").stdout)["up"]
    addresses = {host.name: str(host.address) for host in described.hosts}
    for host in described.hosts:
        resolved = on_host(described, host.name, "getent", "hosts", *addresses).stdout.split("\n")
        assert {line.split()[1]: line.split()[0] for line in resolved if line} == addresses, host.name
        assert "default" not in on_host(described, host.name, "ip", "route").stdout  # nothing beyond the subnet

    storage = {**env, "LAKEHOUSE_HOME": str(tmp_path / "storage")}
    started = json.loads(lakehouse(storage, "hosts", "run", "storage", "--", LAKEHOUSE, "s3", "start").stdout)
    address = addresses["storage"]
    assert started["endpoint"] == f"http://{address}:9000" and started["commit_endpoint"] == f"http://{address}:8000"
    key, secret = saved_credentials(tmp_path / "storage" / "s3")
    analyst = {
        **env,
        "LAKEHOUSE_HOME": str(tmp_path / "analyst"),
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    served = json.loads(lakehouse(analyst, "hosts", "run", "analyst", "--", sys.executable, "-c", CLIENT).stdout)
    assert served == {"endpoint": "http://storage:9000", "keys": ["across-hosts.txt"]}
    assert (tmp_path / "storage" / "s3" / "data" / "lake" / "across-hosts.txt").read_bytes() == b"from the analyst"

    # Bound to the storage host's address: not to its loopback, and the machine's loopback is another.
    for port in (9000, 8000):
        assert on_host(described, "storage", "bash", "-c", f"exec 3<>/dev/tcp/{address}/{port}").returncode == 0
        assert on_host(described, "storage", "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}").returncode != 0
    assert port_answers(9000, address)  # the machine reaches the hosts through the bridge's address
    _refused_on_the_machines_loopback(key, secret)

    pids = [
        int((tmp_path / "storage" / folder / f"{stem}.pid").read_text())
        for folder, stem in (("s3", "s3proxy"), ("dynamodb", "dynamodb"))
    ]
    removed = lakehouse(env, "hosts", "down").stdout
    assert '"processes": 2' in removed and '"namespaces": 11' in removed, removed
    assert leftovers(described.prefix) == [] and not any(running(pid) for pid in pids)
    assert lakehouse(env, "hosts", "down").stdout.strip() == "no hosts were up"


def _refused_on_the_machines_loopback(key: str, secret: str) -> None:
    """The server's own keys get nothing from 127.0.0.1:9000 on the machine: nothing answers there, or
    another server that does not know them."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    config = Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5, s3={"addressing_style": "path"})
    s3 = boto3.client(
        "s3", endpoint_url="http://127.0.0.1:9000", aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=config,
    )  # fmt: skip
    with pytest.raises((BotoCoreError, ClientError)):
        s3.list_objects_v2(Bucket="lake")
