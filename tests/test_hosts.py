"""The deployment's hosts on this machine (``lakehouse hosts``): a network namespace per host of the
description, where the hosts reach each other by name and nothing beyond the subnet; the project's
S3 server started on the storage host binds to that host's address and serves the analyst host, and
answers on no loopback; ``down`` leaves no namespace, link, file or process behind.

The test's deployment is the shipped description under a prefix and subnet of its own, so that it
leaves alone a deployment made with ``lakehouse hosts up``, and another run of this test beside it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from lakehouse.services.process import port_answers
from lakehouse.storage.object_store import saved_credentials
from tests.hosts import LAKEHOUSE, NEEDS_ROOT, answers, lakehouse, leftovers, on_host, own_deployment, running

pytestmark = [pytest.mark.services, *NEEDS_ROOT]

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


@pytest.fixture
def deployed(tmp_path):
    with own_deployment(tmp_path) as described_and_env:
        yield described_and_env


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
        assert answers(described, "storage", address, port)
        assert not answers(described, "storage", "127.0.0.1", port)
    assert port_answers(9000, address)  # the machine reaches the hosts through the bridge's address
    _refused_on_the_machines_loopback(key, secret)
    _cut_off_and_back(described, env, address)
    again = json.loads(lakehouse(analyst, "hosts", "run", "analyst", "--", sys.executable, "-c", CLIENT).stdout)
    assert again == served  # its server ran on through the cut

    pids = [
        int((tmp_path / "storage" / folder / f"{stem}.pid").read_text())
        for folder, stem in (("s3", "s3proxy"), ("dynamodb", "dynamodb"))
    ]
    removed = lakehouse(env, "hosts", "down").stdout
    assert '"processes": 2' in removed and '"namespaces": 11' in removed, removed
    assert leftovers(described.prefix) == [] and not any(running(pid) for pid in pids)
    assert lakehouse(env, "hosts", "down").stdout.strip() == "no hosts were up"


def _cut_off_and_back(described, env: dict[str, str], address: str) -> None:
    """`hosts cut storage`: while it lasts, neither the analyst host nor the machine reaches the
    storage host; then both reach it again."""
    cut_storage = [LAKEHOUSE, "hosts", "cut", "storage", "--seconds", "8"]
    cutting = subprocess.Popen(cut_storage, env=env, stdout=subprocess.PIPE)
    reached, deadline = True, time.monotonic() + 5
    while reached and time.monotonic() < deadline:
        reached = answers(described, "analyst", address, 9000)  # 2 s when it reaches nothing
    assert not reached and not port_answers(9000, address)
    assert cutting.wait(timeout=30) == 0
    cut = json.loads(cutting.stdout.read())
    assert cut["host"] == "storage" and 8 <= cut["back_at"] - cut["cut_at"] < 10, cut
    assert answers(described, "analyst", address, 9000) and port_answers(9000, address)


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
