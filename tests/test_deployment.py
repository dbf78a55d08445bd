"""docker/compose.yaml runs what the tests run: the same settings names, versions and broker
configuration, and the hosts, services and ports of docker/deployment.yaml, whose ports are those the
project's own commands and scripts start the services on. Nothing here starts a container (no Docker
engine in CI): it reads the files."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from lakehouse.errors import LakehouseError
from lakehouse.services import deployment
from lakehouse.services.kafka import KAFKA_VERSION, BrokerFiles, new_cluster_id
from lakehouse.settings import PROJECT_ROOT, Settings, environment_variables
from lakehouse.storage import commits
from lakehouse.vocabulary import DeployedService, S3Commits
from tests.conftest import make_settings

COMPOSE_FILE = PROJECT_ROOT / "docker" / "compose.yaml"
COMPOSE = yaml.safe_load(COMPOSE_FILE.read_text())
SERVICES = COMPOSE["services"]
DESCRIPTION = PROJECT_ROOT / "docker" / "deployment.yaml"
DEPLOYMENT = deployment.load(DESCRIPTION)
# The services that run the platform's code, and what each must be told: where the log, tables and
# checkpoints are, which Spark to submit to, and which brokers hold the log.
PLATFORM_SERVICES = (
    "worker-1",
    "worker-2",
    "spark-service",
    "stream",
    "airflow",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
REQUIRED = (
    "LAKEHOUSE_LOG_URI",
    "LAKEHOUSE_WAREHOUSE_URI",
    "LAKEHOUSE_CHECKPOINT_URI",
    "LAKEHOUSE_SPARK_MASTER",
    "LAKEHOUSE_KAFKA_BOOTSTRAP",
    "LAKEHOUSE_S3_ENDPOINT",
    "LAKEHOUSE_S3_COMMITS",
)


def _lakehouse_environment(service: str) -> dict[str, str]:
    environment = SERVICES[service].get("environment") or {}
    # ${VAR:?...} is compose's substitution from docker/.env: any value will do for the settings.
    return {k: re.sub(r"\$\{[^}]*\}", "x", str(v)) for k, v in environment.items() if k.startswith("LAKEHOUSE_")}


@pytest.mark.parametrize("service", PLATFORM_SERVICES)
def test_each_platform_service_sets_what_it_needs_with_values_the_settings_accept(service):
    environment = _lakehouse_environment(service)
    assert set(REQUIRED) <= set(environment), f"{service} lacks {sorted(set(REQUIRED) - set(environment))}"
    settings = Settings.from_env(environment)
    commits.check(settings)
    assert settings.s3_commits == S3Commits.CONDITIONAL  # its Spark commits to s3a:// are conditional PUTs
    # The jobs run on the cluster; the Spark service, which never ends, on its own driver's cores.
    master = "local[2]" if service == "spark-service" else "spark://spark-master:7077"
    assert settings.kafka_bootstrap == "kafka:9092" and settings.spark_master == master


def test_compose_names_only_variables_the_settings_read():
    named = set(re.findall(r"\bLAKEHOUSE_[A-Z0-9_]+", (PROJECT_ROOT / "docker" / "compose.yaml").read_text()))
    assert named - set(environment_variables()) == set()


def test_the_kafka_service_runs_the_tested_broker_version_and_configuration(tmp_path: Path):
    kafka = SERVICES["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    files = BrokerFiles(tmp_path)
    files.write_configuration("kafka", 9092, 9093)
    tested = dict(line.split("=", 1) for line in files.properties.read_text().splitlines())
    # The image reads KAFKA_<PROPERTY> (dots as underscores) for each broker property.
    keys = ("auto.create.topics.enable", "offsets.topic.replication.factor", "transaction.state.log.min.isr")
    for key in keys:
        assert str(kafka["environment"]["KAFKA_" + key.upper().replace(".", "_")]) == tested[key], key
    # The broker's address: the kafka host's, by name. Its listener does not authenticate clients yet
    # (docs/operations.md, "Deployment"): `lakehouse kafka start`'s asks for SCRAM.
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert advertised.split("://")[1] == tested["advertised.listeners"].split("://")[1]


def test_the_s3a_jars_match_the_hadoop_that_pyspark_ships():
    from pyspark.find_spark_home import _find_spark_home

    from lakehouse.storage.object_store import S3A_JARS

    hadoop = next(c for c in S3A_JARS if c.startswith("org.apache.hadoop:hadoop-aws:")).rsplit(":", 1)[1]
    assert list((Path(_find_spark_home()) / "jars").glob(f"hadoop-client-api-{hadoop}.jar")), hadoop


def test_no_kafka_cluster_id_starts_with_a_dash_which_the_storage_tool_would_read_as_an_option():
    ids = [new_cluster_id() for _ in range(2000)]  # one in 64 would, drawn blindly
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert {len(cluster_id) for cluster_id in ids} == {22} and len(set(ids)) == len(ids)


def test_composes_alertmanager_runs_the_configuration_the_project_writes_for_its_settings(tmp_path, monkeypatch):
    from lakehouse.services import alertmanager

    writer, server = SERVICES["alertmanager-config"], SERVICES["alertmanager"]
    module, written = writer["command"][-2:]
    assert writer["command"][:2] == ["python", "-m"] and module == alertmanager.__name__
    assert f"--config.file={written}" in server["command"] and "--cluster.listen-address=" in server["command"]
    folder = str(Path(written).parent)
    assert [v.split(":")[1] for v in writer["volumes"]] == [folder] and server["volumes"] == [
        f"{writer['volumes'][0]}:ro"
    ]
    assert server["depends_on"]["alertmanager-config"] == {"condition": "service_completed_successfully"}
    # What the module writes for the environment compose gives it: the generated configuration.
    monkeypatch.setenv("LAKEHOUSE_ALERT_WEBHOOK_URL", "http://chat.example/hook")
    alertmanager.main([str(tmp_path / "alertmanager.yml")])
    expected = alertmanager.config_text(Settings.from_env({"LAKEHOUSE_ALERT_WEBHOOK_URL": "http://chat.example/hook"}))
    assert (tmp_path / "alertmanager.yml").read_text() == expected
    assert set(writer["environment"]) == {"LAKEHOUSE_ALERT_WEBHOOK_URL"}


def _one_shot(name: str) -> bool:
    """A job that runs once before others (a bucket, a database): another service waits for it to end."""
    waits = [spec.get("depends_on") for spec in SERVICES.values()]
    return any(
        isinstance(w, dict) and w.get(name, {}).get("condition") == "service_completed_successfully" for w in waits
    )


def test_compose_runs_each_host_of_the_description_with_its_services_and_their_ports():
    described = DEPLOYMENT.compose_services()
    assert {name for name in SERVICES if not _one_shot(name)} == set(described)
    for name, (host, _) in described.items():
        spec = SERVICES[name]
        if name == host.name:  # the host's container: every port of the host's services
            assert spec.get("hostname") == host.name, name
            assert sorted(int(port) for port in spec.get("expose", [])) == DEPLOYMENT.host_ports(host), name
        else:  # another service of the host, on the host's network
            assert spec.get("network_mode") == f"service:{host.name}" and "expose" not in spec, name
        bind = (spec.get("environment") or {}).get("LAKEHOUSE_BIND_ADDRESS")
        assert bind in (None, host.name), f"{name} binds to {bind}, not its host's address"


def _strings(node, key: str = ""):
    """Every string of the compose file but the images' names (``apache/kafka:4.1.1`` is no address)."""
    if isinstance(node, dict):
        for child_key, child in node.items():
            yield from _strings(child, str(child_key))
    elif isinstance(node, list):
        for child in node:
            yield from _strings(child, key)
    elif key != "image":
        yield str(node)


def test_compose_reaches_each_host_only_on_ports_the_description_gives_it():
    mentioned = {
        (host, int(port))
        for text in _strings(COMPOSE)
        for host, port in re.findall(r"(?<![\w.-])([a-z][a-z0-9-]*):(\d+)\b", text)
        if host in DEPLOYMENT.host_names()
    }
    wrong = {(h, p) for h, p in mentioned if p not in DEPLOYMENT.host_ports(DEPLOYMENT.host(h))}
    assert not wrong, f"compose reaches hosts on ports the description does not give them: {sorted(wrong)}"
    # The clients' settings are the description's addresses.
    assert DEPLOYMENT.client_environment().items() <= COMPOSE["x-lakehouse-env"].items()
    assert {("storage", 9000), ("kafka", 9092), ("metastore", 54329), ("spark-master", 7077)} <= mentioned


def script_default(variable: str) -> int:
    return int(re.search(rf"\$\{{{variable}:-(\d+)\}}", (PROJECT_ROOT / "scripts" / "airflow.sh").read_text())[1])


def test_the_described_ports_are_those_the_services_start_on_by_default():
    defaults = Settings.from_env({})
    started_on = {
        DeployedService.S3: {"s3": defaults.s3_port},
        DeployedService.KAFKA: {"broker": defaults.kafka_port},
        DeployedService.POSTGRESQL: {"sql": script_default("AIRFLOW_PG_PORT")},
        DeployedService.SPARK_MASTER: {"master": defaults.cluster_port},
        DeployedService.SPARK_SERVICE: {"connect": defaults.connect_port, "thrift": defaults.thrift_port},
        DeployedService.AIRFLOW_API_SERVER: {"api": script_default("AIRFLOW_PORT")},
        DeployedService.AIRFLOW_METRICS: {"metrics": script_default("AIRFLOW_METRICS_PORT")},
        DeployedService.PROMETHEUS: {"web": defaults.prometheus_port},
        DeployedService.ALERTMANAGER: {"web": defaults.alertmanager_port},
    }
    # The one port whose one-machine default is any free one: the stream's metrics endpoint, told its
    # described port on its host (and Prometheus told where to find it, below).
    assert defaults.metrics_port == "0" and set(DEPLOYMENT.ports[DeployedService.SPEED_LAYER]) == {"metrics"}
    described = {service: dict(ports) for service, ports in DEPLOYMENT.ports.items() if ports}
    del described[DeployedService.SPEED_LAYER]
    assert described == started_on
    assert set(DEPLOYMENT.ports) == set(DeployedService)
    assert defaults.bind_address == "127.0.0.1"  # one machine: every service on loopback


@pytest.mark.parametrize(
    ("job", "service", "host"),
    [
        ("lakehouse_stream", DeployedService.SPEED_LAYER, "stream"),
        ("airflow", DeployedService.AIRFLOW_METRICS, "airflow"),
    ],
)
def test_the_monitor_hosts_prometheus_scrapes_each_endpoint_at_its_described_port_in_both_deployments(
    tmp_path, job, service, host
):
    """`lakehouse prometheus start` on the monitor host, told by `hosts run`, and compose's Prometheus
    (docker/prometheus.yml) scrape the stream and Airflow's StatsD exporter where the description
    puts them; on one machine, only what the home's files name."""
    from lakehouse.services import prometheus

    target = [{"targets": [f"{host}:{DEPLOYMENT.ports[service]['metrics']}"]}]
    monitor = DEPLOYMENT.host_environment(DEPLOYMENT.host("monitor"))
    config = yaml.safe_load(prometheus.config_text(make_settings(tmp_path, **monitor), tmp_path / "alerts.yml"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs[job]["static_configs"] == target and "static_configs" not in jobs["spark_service"]
    assert "static_configs" not in prometheus_job_on(tmp_path, job)
    composed = yaml.safe_load((PROJECT_ROOT / "docker" / "prometheus.yml").read_text())["scrape_configs"]
    composed_job = next(entry for entry in composed if entry["job_name"] == job)
    assert composed_job["static_configs"] == target and composed_job["honor_labels"]


def test_composes_stream_and_statsd_exporter_serve_at_their_described_ports():
    assert SERVICES["stream"]["environment"]["LAKEHOUSE_METRICS_PORT"] == str(
        DEPLOYMENT.ports[DeployedService.SPEED_LAYER]["metrics"]
    )
    exporter = SERVICES["airflow-metrics"]["command"]
    assert exporter[exporter.index("--http-port") + 1] == str(
        DEPLOYMENT.ports[DeployedService.AIRFLOW_METRICS]["metrics"]
    )
    assert exporter[exporter.index("--udp-port") + 1] == COMPOSE["x-airflow-env"]["AIRFLOW__METRICS__STATSD_PORT"]


def prometheus_job_on(home: Path, job: str = "lakehouse_stream") -> dict:
    """A job of one machine's Prometheus: the endpoints its home's files name, no others."""
    from lakehouse.services import prometheus

    config = yaml.safe_load(prometheus.config_text(make_settings(home), home / "alerts.yml"))
    return next(entry for entry in config["scrape_configs"] if entry["job_name"] == job)


def test_each_host_is_told_its_address_to_bind_to_and_the_services_by_name():
    storage = DEPLOYMENT.host("storage")
    assert DEPLOYMENT.host_environment(storage) == {
        "LAKEHOUSE_S3_ENDPOINT": "http://storage:9000",
        "LAKEHOUSE_KAFKA_BOOTSTRAP": "kafka:9092",
        "LAKEHOUSE_SPARK_MASTER": "spark://spark-master:7077",
        "LAKEHOUSE_SQL_ROUTE": "sc://spark-service:15002",
        "LAKEHOUSE_PROMETHEUS_STREAM_TARGETS": "stream:9464",
        "LAKEHOUSE_PROMETHEUS_AIRFLOW_TARGETS": "airflow:9102",
        "LAKEHOUSE_BIND_ADDRESS": "10.77.0.2",
    }
    Settings.from_env(DEPLOYMENT.host_environment(storage))  # values the settings accept
    stream = DEPLOYMENT.host_environment(DEPLOYMENT.host("stream"))
    assert Settings.from_env(stream).metrics_port_number() == 9464
    lines = DEPLOYMENT.hosts_file(storage, "box").splitlines()
    assert "10.77.0.2\tstorage box" in lines and "10.77.0.12\tanalyst" in lines and "127.0.0.1\tlocalhost" in lines
    names = [DEPLOYMENT.namespace(h) for h in DEPLOYMENT.hosts] + [DEPLOYMENT.link(h) for h in DEPLOYMENT.hosts]
    assert all(name.startswith("lakehouse-") for name in [*names, DEPLOYMENT.bridge])
    assert max(len(DEPLOYMENT.link(h)) for h in DEPLOYMENT.hosts) <= 15  # a link's name holds 15 characters


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("hosts", "kafka", "address", "10.78.0.3"),
            "hosts.kafka.address: 10.78.0.3 is no host address of 10.77.0.0/24",
        ),
        (("hosts", "kafka", "address", "10.77.0.2"), "hosts.kafka.address: 10.77.0.2 is already storage's"),
        (("hosts", "kafka", "address", "10.77.0.1"), "hosts.kafka.address: 10.77.0.1 is already the machine's"),
        (("hosts", "kafka", "services", ["kafak"]), "hosts.kafka.services: no service 'kafak'; one of s3, kafka"),
        (("network", "prefix", "lakehouse-prod"), "network.prefix: lower-case letters, digits and '-', at most 10"),
        (("services", "s3", {"api": 9000}), "services: a client needs the port named 's3'"),
        (("hosts", "analyst", "services", ["s3", "alertmanager"]), "hosts: alertmanager would name two containers"),
    ],
)
def test_a_wrong_description_is_refused_naming_its_field(tmp_path, change, message):
    description = yaml.safe_load(DESCRIPTION.read_text())
    *path, value = change
    node = description
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(description, sort_keys=False))
    with pytest.raises(LakehouseError, match=re.escape(message)):
        deployment.load(tmp_path / "deployment.yaml")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["hosts", "run"], "name a host and a command: lakehouse hosts run HOST -- COMMAND"),
        (["hosts", "run", "storage"], "name a host and a command"),
        (["hosts", "up", "storage"], "`lakehouse hosts up` takes no host and no command; `run` and `cut` do"),
        (["hosts", "cut"], "name the host to cut off: lakehouse hosts cut HOST [--from OTHER] [--seconds N]"),
        (["hosts", "cut", "stream", "--from", "stream"], "a host is not cut from itself: name another host"),
        (["hosts", "cut", "stream", "--from", "strage"], "no host 'strage' in the deployment: one of storage, kafka"),
        (["hosts", "cut", "nowhere"], "no host 'nowhere' in the deployment: one of storage, kafka"),
        (["hosts", "run", "nowhere", "--", "true"], "no host 'nowhere' in the deployment: one of storage, kafka"),
    ],
)
def test_a_wrong_hosts_command_is_a_one_line_error_before_anything_is_made(arguments, message, capsys):
    from lakehouse.cli import main

    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"lakehouse: error: {message}") and error.count("\n") == 1


def test_a_missing_description_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    from lakehouse.cli import main

    monkeypatch.setenv("LAKEHOUSE_DEPLOYMENT", str(tmp_path / "nowhere.yaml"))
    assert main(["hosts", "status"]) == 2
    assert capsys.readouterr().err.startswith(f"lakehouse: error: cannot read the deployment {tmp_path}/nowhere.yaml")


def _shell_scripts(compose: dict) -> dict[str, tuple[str, str]]:
    """Each service's shell script: a command or entrypoint that runs ``sh -c`` or ``bash -c``, split as
    compose splits a string (shell words), with compose's ``$$`` already turned into ``$``."""
    scripts = {}
    for name, service in compose["services"].items():
        for key in ("entrypoint", "command"):
            argv = service.get(key)
            argv = shlex.split(argv) if isinstance(argv, str) else argv or []
            if len(argv) >= 3 and argv[0] in ("sh", "bash") and argv[1] == "-c":
                scripts[f"{name}.{key}"] = (argv[0], argv[2].replace("$$", "$"))
    return scripts


def test_every_shell_script_compose_runs_parses():
    # A folded YAML block keeps the line breaks of its more-indented lines: a script continued on a
    # line that starts with `&&` or `||` is then a syntax error when the container starts.
    scripts = _shell_scripts(yaml.safe_load(COMPOSE_FILE.read_text()))
    assert {"metastore-database.entrypoint", "storage-bucket.entrypoint", "airflow-init.command"} <= set(scripts)
    for name, (shell, script) in scripts.items():
        checked = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
