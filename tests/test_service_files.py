"""The services' files, ports and routing, without starting them: plain Python, no JVM."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.services import cluster, kafka, kafka_access, process
from lakehouse.services.process import claim_port, ephemeral_floor, free_port, saved_port
from lakehouse.services.spark_service import ServiceState, _service_environment, connect_url, status
from lakehouse.serving.server import endpoint_confs, hive_site
from lakehouse.settings import Settings
from lakehouse.storage import kafka_auth
from lakehouse.vocabulary import ClusterRole


def _settings(tmp_path, **env) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home"), **env})


def test_hive_site_carries_the_metastore_connection_with_its_characters_escaped(tmp_path):
    settings = _settings(
        tmp_path,
        LAKEHOUSE_METASTORE_URL="jdbc:postgresql://127.0.0.1:5432/metastore",
        LAKEHOUSE_METASTORE_USER="metastore",
        LAKEHOUSE_METASTORE_PASSWORD="a<b&c>'d\"",
    )
    root = ET.fromstring(hive_site(settings))
    properties = {p.findtext("name"): p.findtext("value") for p in root.iter("property")}

    assert properties["javax.jdo.option.ConnectionURL"] == "jdbc:postgresql://127.0.0.1:5432/metastore"
    assert properties["javax.jdo.option.ConnectionPassword"] == "a<b&c>'d\""
    assert properties["datanucleus.schema.autoCreateTables"] == "true"
    assert properties["datanucleus.schema.autoCreateConstraints"] == "false"


def test_sql_runs_embedded_when_no_service_is_up_or_the_route_says_so(tmp_path):
    assert connect_url(_settings(tmp_path)) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="embedded")) is None
    assert connect_url(_settings(tmp_path, LAKEHOUSE_SQL_ROUTE="sc://db:15002")) == "sc://db:15002"


def test_a_service_that_ended_is_not_running_before_its_exit_status_is_collected(tmp_path):
    """A SIGKILLed service is a zombie until whichever process inherited it reaps it, which may take
    seconds: a start after a host's crash must not be refused meanwhile."""
    import subprocess

    from lakehouse.services.process import Detached, pid_alive

    child = subprocess.Popen(["sleep", "60"])
    files = Detached("sleeper", tmp_path / "sleeper.pid", tmp_path / "sleeper.log")
    files.pid_file.write_text(str(child.pid))
    assert pid_alive(child.pid)
    child.kill()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.05)
    try:
        assert not pid_alive(child.pid)  # ended, not yet reaped: this process has not waited for it
        files.refuse_if_running("lakehouse sleeper stop")
    finally:
        child.wait()


def test_a_state_file_left_by_a_dead_service_does_not_count_as_up(tmp_path):
    settings = _settings(tmp_path)
    files = ServiceState.of(settings)
    files.folder.mkdir(parents=True)
    (files.folder / "server.pid").write_text("999999999")
    files.write_ready(999999999, ["gold.toll_traffic"])

    assert status(settings) == {"up": False, "pid": None, "log": str(files.log)}
    assert connect_url(settings) is None


def test_a_service_keeps_the_port_it_was_set_up_on_and_refuses_another_or_a_taken_one(tmp_path):
    first = claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server")
    assert saved_port(tmp_path) == first and claim_port(tmp_path, None, "LAKEHOUSE_S3_PORT", "S3 server") == first
    assert claim_port(tmp_path, first, "LAKEHOUSE_S3_PORT", "S3 server") == first
    with pytest.raises(
        LakehouseError, match=f"this home's S3 server was set up on port {first}: set LAKEHOUSE_S3_PORT={first}"
    ):
        claim_port(tmp_path, first + 1, "LAKEHOUSE_S3_PORT", "S3 server")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        with pytest.raises(LakehouseError, match=f"port {taken} is taken"):
            claim_port(tmp_path / "other", taken, "LAKEHOUSE_DYNAMODB_PORT", "DynamoDB server")
    assert saved_port(tmp_path / "other") is None


# Another loopback address: a service bound to it does not answer on 127.0.0.1, as one bound to a
# host's address in a deployment across hosts does not (tests/test_hosts.py runs that).
ELSEWHERE = "127.0.0.2"


def test_a_free_port_lies_below_the_ephemeral_range_and_skips_taken_and_handed_out_ones(monkeypatch):
    """No outgoing connection can be handed a chosen port before its service binds it, and two ports
    chosen for one deployment differ."""
    ports = [free_port() for _ in range(20)]
    assert all(process.CHOSEN_PORTS_FLOOR <= port < ephemeral_floor() for port in ports), ports
    assert len(set(ports)) == len(ports)
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        draws = iter([taken.getsockname()[1], ports[0], 23_456, 23_457])
        monkeypatch.setattr(process._ports, "randrange", lambda *_: next(draws))
        chosen = free_port()
    assert chosen in (23_456, 23_457) and chosen not in ports


def test_the_spark_service_binds_both_endpoints_and_its_ui_to_the_bind_address(tmp_path):
    bound = _settings(tmp_path, LAKEHOUSE_BIND_ADDRESS="10.77.0.8")
    assert endpoint_confs(bound)["spark.connect.grpc.binding.address"] == "10.77.0.8"
    assert endpoint_confs(bound)["spark.hadoop.hive.server2.thrift.bind.host"] == "10.77.0.8"
    assert _service_environment(bound)["SPARK_LOCAL_IP"] == "10.77.0.8"  # its UI, with Spark's metrics
    assert set(endpoint_confs(_settings(tmp_path)).values()) >= {"127.0.0.1"}  # one machine: loopback


def test_a_spark_service_up_on_the_bind_address_is_up_there_and_named_there(tmp_path):
    settings = _settings(tmp_path, LAKEHOUSE_BIND_ADDRESS=ELSEWHERE)
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(2):  # its two endpoints
            listener = stack.enter_context(socket.socket())
            listener.bind((ELSEWHERE, 0))
            listener.listen()
            ports.append(listener.getsockname()[1])
        files = ServiceState(settings.service_dir(), *ports, ELSEWHERE)
        files.folder.mkdir(parents=True)
        (files.folder / "server.pid").write_text(str(os.getpid()))
        files.write_ready(os.getpid(), [])
        report = status(settings)
    assert report["up"] and report["connect"] == f"sc://{ELSEWHERE}:{ports[0]}"
    trust_store = files.authority.trust_store
    assert report["jdbc"] == f"jdbc:hive2://{ELSEWHERE}:{ports[1]}/default;ssl=true;sslTrustStore={trust_store}"


def test_the_cluster_daemons_bind_to_the_bind_address(tmp_path):
    master = cluster.master_arguments("10.77.0.5", 7077, 8080)
    worker = cluster.worker_arguments("10.77.0.6", "spark://10.77.0.5:7077", 8081, tmp_path)
    assert master[master.index("--host") + 1] == "10.77.0.5" and master[master.index("--port") + 1] == "7077"
    assert worker[worker.index("--host") + 1] == "10.77.0.6" and worker[-1] == "spark://10.77.0.5:7077"
    assert cluster.daemon_environment(tmp_path, "10.77.0.6")["SPARK_LOCAL_IP"] == "10.77.0.6"


def test_a_worker_alone_registers_with_the_master_the_settings_name_or_starts_nothing(tmp_path, monkeypatch, capsys):
    from lakehouse.cli import main

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "local[2]")
    assert main(["cluster", "start", "--role", "worker"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lakehouse: error: a worker registers with a master: set LAKEHOUSE_SPARK_MASTER=spark://")
    assert error.count("\n") == 1 and not (tmp_path / "home").exists()
    assert main(["cluster", "status", "--role", "master"]) == 2
    assert "--role is for start" in capsys.readouterr().err


def test_a_clusters_role_is_read_from_the_daemons_its_home_started():
    assert cluster.role_of({}) is None
    assert cluster.role_of({"master": 1, "worker-1": 2, "worker-2": 3}) is ClusterRole.ALL
    assert cluster.role_of({"master": 1}) is ClusterRole.MASTER
    assert cluster.role_of({"worker": 2}) is ClusterRole.WORKER


def test_a_driver_binds_to_its_hosts_address_and_to_loopback_on_one_machine(tmp_path):
    from lakehouse.storage.spark import driver_address

    on_host = _settings(
        tmp_path, LAKEHOUSE_BIND_ADDRESS="10.77.0.10", LAKEHOUSE_SPARK_MASTER="spark://spark-master:7077"
    )
    assert driver_address(on_host) == "10.77.0.10"
    assert driver_address(_settings(tmp_path)) == "127.0.0.1"  # local[2]
    assert driver_address(_settings(tmp_path, LAKEHOUSE_SPARK_MASTER="spark://127.0.0.1:7077")) == "127.0.0.1"
    assert driver_address(_settings(tmp_path, LAKEHOUSE_SPARK_MASTER="spark://spark-master:7077")) is None


def test_a_drivers_jvm_gets_its_hosts_address_over_an_inherited_one_and_an_inherited_one_over_loopback(
    tmp_path, monkeypatch
):
    """A job's session sets it before its JVM starts; the Airflow tasks' spark-submit, whose driver's
    JVM starts before the job's Python, gets a host's address, and on one machine what it inherits."""
    from lakehouse.ops.airflow_support import spark_env
    from lakehouse.storage.spark import driver_local_ip

    on_host = {"LAKEHOUSE_BIND_ADDRESS": "10.77.0.9", "LAKEHOUSE_SPARK_MASTER": "spark://spark-master:7077"}
    assert driver_local_ip(_settings(tmp_path, **on_host), "127.0.0.1") == "10.77.0.9"
    assert driver_local_ip(_settings(tmp_path), "192.0.2.7") == "192.0.2.7"
    assert driver_local_ip(_settings(tmp_path), None) == "127.0.0.1"  # local[2]
    assert driver_local_ip(_settings(tmp_path, LAKEHOUSE_SPARK_MASTER="spark://spark-master:7077"), None) is None
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    assert "SPARK_LOCAL_IP" not in spark_env()
    for name, value in {**on_host, "SPARK_LOCAL_IP": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    assert spark_env()["SPARK_LOCAL_IP"] == "10.77.0.9"


def test_a_kafka_broker_set_up_on_one_address_is_found_there_and_refuses_to_start_on_another(tmp_path):
    settings = _settings(tmp_path)
    files = kafka.BrokerFiles(settings.kafka_dir())
    files.folder.mkdir(parents=True)
    files.write_configuration(ELSEWHERE, 9092, 9093)
    properties = dict(line.split("=", 1) for line in files.properties.read_text().splitlines())
    assert properties["listeners"] == f"SASL_SSL://{ELSEWHERE}:9092,CONTROLLER://{ELSEWHERE}:9093"
    assert properties["controller.quorum.bootstrap.servers"] == f"{ELSEWHERE}:9093"
    with pytest.raises(LakehouseError, match=f"set up on {ELSEWHERE}: set LAKEHOUSE_BIND_ADDRESS={ELSEWHERE}$"):
        kafka.start(settings)


def test_the_kafka_broker_authenticates_every_client_and_grants_nothing_by_default(tmp_path):
    files = kafka.BrokerFiles(tmp_path / "kafka")
    files.folder.mkdir()
    files.write_configuration("127.0.0.1", 9092, 9093)
    properties = dict(line.split("=", 1) for line in files.properties.read_text().splitlines())
    assert properties["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT"
    # Clients log in over TLS, to the key and certificate the home's authority issued the broker.
    assert (properties["ssl.keystore.type"], properties["ssl.truststore.type"]) == ("PEM", "PEM")
    assert properties["ssl.keystore.location"] == str(files.folder / "tls" / "broker.pem")
    assert properties["ssl.truststore.location"] == str(files.folder / "tls" / "ca.crt")
    assert properties["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert properties["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert (properties["allow.everyone.if.no.acl.found"], properties["super.users"]) == (
        "false",
        "User:lakehouse-admin",
    )
    # The admin's password, in the configuration and the credentials file, readable by their owner alone.
    password = kafka_auth.saved_passwords(files.credentials)[kafka_auth.ADMIN]
    assert f'password="{password}"' in properties["listener.name.controller.plain.sasl.jaas.config"]
    assert {oct(path.stat().st_mode & 0o777) for path in (files.credentials, files.properties)} == {"0o600"}
    files.write_configuration("127.0.0.1", 9092, 9093)  # a later start keeps the password
    assert kafka_auth.saved_passwords(files.credentials)[kafka_auth.ADMIN] == password


def test_each_producer_may_write_its_own_topic_alone_and_the_reader_nothing():
    grants = kafka_access.acl_grants({"tolls": "prod.tolls", "scores": "prod.scores"})
    allowed = {(principal, resource, name, operation) for principal, resource, _, name, operation in grants}
    producer = kafka_auth.producer("tolls")
    assert {(n, o) for p, r, n, o in allowed if p == producer} == {
        ("prod.tolls", "WRITE"),
        ("prod.tolls", "DESCRIBE"),
        ("prod.tolls", "DESCRIBE_CONFIGS"),  # its retention, read before it produces
    }
    reader = {(r, n, o) for p, r, n, o in allowed if p == kafka_auth.READER}
    assert {o for _, _, o in reader} == {"READ", "DESCRIBE"}
    assert {n for r, n, _ in reader if r == "TOPIC"} == {"prod.tolls", "prod.scores"}
    assert {n for r, n, _ in reader if r == "GROUP"} == {kafka_auth.GROUP_PREFIX}
    assert not [grant for grant in grants if grant[4] in ("CREATE", "ALTER", "DELETE")]


def test_a_client_takes_its_roles_principal_from_the_credentials_file_or_the_one_user_set(tmp_path):
    file = tmp_path / "credentials.json"
    kafka_auth.save_passwords(file, {kafka_auth.READER: "r", kafka_auth.producer("tolls"): "p"})
    settings = _settings(tmp_path, LAKEHOUSE_KAFKA_CREDENTIALS=str(file), LAKEHOUSE_KAFKA_BOOTSTRAP="k:9092")
    assert kafka_auth.identity(settings, kafka_auth.producer("tolls")) == (kafka_auth.producer("tolls"), "p")
    as_reader = settings.replace(kafka_user=kafka_auth.READER)
    assert kafka_auth.identity(as_reader, kafka_auth.producer("tolls")) == (kafka_auth.READER, "r")
    with pytest.raises(
        LakehouseError, match=r"^no certificate authority for Kafka's TLS at .*tls/ca.crt: set LAKEHOUSE_KAFKA_CA"
    ):
        kafka_auth.spark_options(settings)
    authority = tmp_path / "tls" / "ca.crt"  # beside the credentials file, as the broker's home has it
    authority.parent.mkdir()
    authority.write_text("a certificate")
    options = kafka_auth.spark_options(settings)
    assert options["kafka.sasl.jaas.config"].endswith(f'username="{kafka_auth.READER}" password="r";')
    assert (options["kafka.security.protocol"], options["kafka.ssl.truststore.location"]) == (
        "SASL_SSL",
        str(authority),
    )
    elsewhere = settings.replace(kafka_ca=str(tmp_path / "ca.pem"))
    assert elsewhere.kafka_ca_file() == tmp_path / "ca.pem"
    assert options["groupIdPrefix"].startswith(kafka_auth.GROUP_PREFIX)
    assert kafka_auth.identity(_settings(tmp_path), kafka_auth.READER) is None  # no file: no authentication
    assert "sasl.username" not in kafka_auth.client_config(_settings(tmp_path), kafka_auth.READER)
    with pytest.raises(LakehouseError, match="^no password for Kafka user someone: set LAKEHOUSE_KAFKA_PASSWORD"):
        kafka_auth.identity(settings.replace(kafka_user="someone"), kafka_auth.READER)
    assert "kafka_password" not in repr(settings.replace(kafka_password="secret"))


def test_a_broker_home_set_up_before_logins_is_refused_rather_than_left_open(tmp_path):
    settings = _settings(tmp_path)
    files = kafka.BrokerFiles(settings.kafka_dir())
    files.folder.mkdir(parents=True)
    files.properties.write_text("listeners=PLAINTEXT://127.0.0.1:9092\n")
    with pytest.raises(LakehouseError, match=r"^this home's broker \(.*\) lets any client in: stop it"):
        kafka.start(settings)


def _users(*args) -> tuple[int, str, str]:
    """`lakehouse users ...` in this process, on a home of its own."""
    import contextlib as context
    import io

    from lakehouse.cli import main

    out, err = io.StringIO(), io.StringIO()
    with context.redirect_stdout(out), context.redirect_stderr(err):
        code = main(["users", *args])
    return code, out.getvalue(), err.getvalue()


def test_users_add_prints_a_new_secret_once_and_keeps_only_its_salted_slow_hash(tmp_path, monkeypatch):
    from lakehouse.serving.users import ITERATIONS, read_users, secret_matches, users_file

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    code, out, _ = _users("add", "alice", "--role", "operator")
    _, second, _ = _users("add", "bob")

    secret = out.splitlines()[-1]
    path = users_file(_settings(tmp_path))
    stored = read_users(path)
    assert code == 0 and len(secret) >= 40 and secret not in path.read_text()
    assert stored["alice"]["role"] == "operator" and stored["bob"]["role"] == "analyst"
    scheme, iterations, salt, _ = stored["alice"]["hash"].split("$")
    assert (scheme, int(iterations)) == ("pbkdf2_sha256", ITERATIONS) and ITERATIONS >= 100_000
    assert salt != stored["bob"]["hash"].split("$")[2]  # a salt of its own
    assert secret_matches(stored["alice"]["hash"], secret) and not secret_matches(stored["alice"]["hash"], secret + "x")
    assert secret != second.splitlines()[-1]
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_users_list_and_remove_and_each_bad_request_is_one_line_that_changes_nothing(tmp_path, monkeypatch):
    import json

    from lakehouse.serving.users import users_file

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "home"))
    _users("add", "alice")
    before = users_file(_settings(tmp_path)).read_text()
    bad = {
        ("add", "alice"): "lakehouse: error: user alice exists: remove it first to give it a new secret\n",
        ("add", "lakehouse-jobs"): "is the platform's jobs'",
        ("add", "Alice Smith"): "a user name is a lowercase letter",
        ("remove", "nobody"): "lakehouse: error: no user nobody (`lakehouse users list` lists them)\n",
        ("add",): "lakehouse: error: `lakehouse users add` needs the user's name\n",
    }
    for args, said in bad.items():
        code, _, err = _users(*args)
        assert code == 2 and said in err and err.count("\n") == 1, (args, err)
    assert users_file(_settings(tmp_path)).read_text() == before

    listed = json.loads(_users("list")[1])
    removed = _users("remove", "alice")

    assert [(u["name"], u["role"]) for u in listed] == [("alice", "analyst")] and "hash" not in listed[0]
    assert removed[0] == 0 and json.loads(_users("list")[1]) == []


def test_the_service_gets_no_clients_secret_in_its_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_SQL_PASSWORD", "analyst-secret")
    monkeypatch.setenv("LAKEHOUSE_SPARK_REMOTE_TOKEN", "job-secret")

    env = _service_environment(_settings(tmp_path))

    assert "LAKEHOUSE_SQL_PASSWORD" not in env and "LAKEHOUSE_SPARK_REMOTE_TOKEN" not in env
    assert env["LAKEHOUSE_HOME"].endswith("home")


def test_lakehouse_sql_through_a_service_asks_for_a_user_and_password_before_connecting(tmp_path):
    from lakehouse.commands.reading import _sql_session

    settings = _settings(tmp_path, LAKEHOUSE_SQL_ROUTE="sc://127.0.0.1:1", LAKEHOUSE_SQL_USER="alice")

    with pytest.raises(LakehouseError, match="set LAKEHOUSE_SQL_USER and LAKEHOUSE_SQL_PASSWORD"):
        _sql_session(settings)


def test_lakehouse_sql_to_a_service_that_does_not_answer_ends_in_one_line_naming_the_address(tmp_path):
    """What an analyst meets while the service's host restarts: no ten minutes of silent retries,
    no stack, one line with the address tried."""
    import subprocess
    import sys

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: refused
        env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SQL_ROUTE": f"sc://127.0.0.1:{port}"}
        env |= {"LAKEHOUSE_SQL_USER": "alice", "LAKEHOUSE_SQL_PASSWORD": "s3cret"}
        out = subprocess.run(
            [sys.executable, "-m", "lakehouse.cli", "sql", "SELECT 1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "the Spark service does not answer" in out.stderr, out.stderr
    # The address tried last: loopback's is dialled as localhost, IPv6's or IPv4's first.
    assert f":{port}: Failed to connect" in out.stderr and "Connection refused" in out.stderr


def test_a_connect_login_sends_its_token_as_call_credentials_on_loopback_and_as_a_header_elsewhere():
    from lakehouse.storage.spark import connect_builder

    local = connect_builder("sc://127.0.0.1:15002", "alice", "s3cret")._channel_builder
    remote = connect_builder("sc://spark-service:15002", "alice", "s3cret")._channel_builder

    assert (local.host, local.token, local.userId, dict(local.metadata())) == ("localhost", "s3cret", "alice", {})
    assert (remote.host, remote.token, remote.secure) == ("spark-service", None, False)
    assert dict(remote.metadata()) == {"authorization": "Bearer s3cret"}
