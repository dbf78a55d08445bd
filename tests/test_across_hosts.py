"""The whole loop across the deployment's hosts on this machine (``lakehouse hosts``, a network
namespace per host), each process started as an operator starts it with ``lakehouse hosts run``: the
S3 server on the storage host, the Kafka broker on the kafka host, the Spark master on the
spark-master host and a worker on each worker host; the producer on the analyst host writes the
generated log to Kafka; the stream's driver on the stream host runs on the cluster's executors (and
is SIGKILLed after its first batch's MERGE, before its progress row, and restarted); a late record;
PostgreSQL on the metastore host and Airflow on the airflow host on that database, where the
operator triggers a backfill from Kafka through Airflow's REST API and its task submits it to the
cluster; a correction submitted to the cluster from the airflow host; the tables and checkpoints on
S3 at storage:9000; the Spark service on the spark-service host (started while those jobs run), its
catalog in the Hive metastore in the metastore host's PostgreSQL, which the analyst host then
queries over Spark Connect (``lakehouse sql``) and over JDBC (beeline).
The tables, the audit and the serving view equal the embedded default's (local[2], file log) on the
same events, row for row; every service listens on its host's address alone; ``down`` leaves nothing
behind. In `make chaos` (HOST_FAULTS=all) the kafka host restarts while the stream reads; the stream
host is cut from the storage host for 30 s while the stream runs, and the stall alert goes from
Prometheus and the Alertmanager on the monitor host to a webhook receiver on the machine (that
Prometheus also scrapes Airflow's StatsD exporter on the airflow host); the
spark-service host restarts while the analyst asks.

The tests' session compares what the loop wrote: it reaches the storage host's bucket through the
bridge (the machine's address on the subnet), and the broker at the kafka host's address."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.audit.reconcile import Auditor
from lakehouse.dataflow.pipelines import get_dimension, get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.corrections import CorrectionRun
from lakehouse.layers.speed import run_speed_layer
from lakehouse.ops.airflow_client import FINISHED
from lakehouse.services import deployment
from lakehouse.services.prometheus import AIRFLOW_JOB, STREAM_JOB
from lakehouse.services.spark_service import METASTORE_DRIVER, ServiceState, jdbc_url
from lakehouse.serving.sql import format_rows
from lakehouse.settings import KAFKA_CREDENTIALS, LOOPBACK, PROJECT_ROOT, Settings
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables, register_tables
from lakehouse.storage.dimensions import apply_change_file
from lakehouse.storage.kafka_log import KafkaLogWriter
from lakehouse.storage.log import LogWriter
from lakehouse.storage.object_store import saved_credentials
from lakehouse.storage.ops_tables import arrow_at
from lakehouse.vocabulary import DeployedService, Source
from tests.chaos import kill_after
from tests.conftest import make_settings
from tests.hosts import LAKEHOUSE, NEEDS_ROOT, answers, lakehouse, leftovers, on_host, own_deployment, running
from tests.services import beeline_command
from tests.test_airflow_e2e import Airflow, wait_for_dags
from tests.test_deployment import script_default
from tests.test_exit_codes import Store, change_log, lines, run_loop
from tests.test_kafka import RETENTION, rows
from tests.test_metrics import prometheus_api, stall_notification, until, webhook_receiver
from tests.test_service import metastore_tables

pytestmark = [pytest.mark.services, pytest.mark.slow, *NEEDS_ROOT]

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
CONFIG = GeneratorConfig(
    events=1500,
    seed=11,
    rate=6.0,
    late_fraction=0.06,
    late_delay="3m",
    duplicate_fraction=0.04,
    malformed_fraction=0.03,
    events_per_file=250,
)
WINDOW_RANGE = ("2026-01-05T08:00:00Z", "2026-01-05T09:00:00Z")
BUCKET = "across-hosts"
# How long a worker is cut off the network while the backfill runs on it (issue: a minute).
CUT_SECONDS = 60
# CI makes one host fault, the worker's cut; `make chaos` sets HOST_FAULTS=all for every one.
ALL_HOST_FAULTS = os.environ.get("HOST_FAULTS") == "all"
# How long the stream host is cut from the storage host while the stream runs (issue: 30 s), and the
# record that arrives meanwhile.
STALL_SECONDS = 30
STALLED = "straggler-2"
# The late records the loop adds to the generated log: the straggler, and the stalled one in `make chaos`.
ADDED_RECORDS = 2 if ALL_HOST_FAULTS else 1
# The stall drill's stream, Prometheus and Alertmanager at a pace it sees within seconds.
WATCHED_PACE = {
    "LAKEHOUSE_TRIGGER_INTERVAL": "1s",
    "LAKEHOUSE_PROMETHEUS_SCRAPE_INTERVAL": "1s",
    "LAKEHOUSE_ALERT_FOR": "2s",
    "LAKEHOUSE_ALERT_GROUP_WAIT": "1s",
    "LAKEHOUSE_ALERT_GROUP_INTERVAL": "1s",
}
# Each JVM-free command's runs from the analyst host on the storage host's S3 (issue: 200, 0 aborts):
# in `make chaos`, or with LAKEHOUSE_EXIT_HOST_RUNS; none in CI, where tests/test_exit_codes.py runs
# the same loops on the project's S3 server on loopback.
JVM_FREE_RUNS = int(os.environ.get("LAKEHOUSE_EXIT_HOST_RUNS", "200" if ALL_HOST_FAULTS else "0"))
AIRFLOW_SCRIPT = str(PROJECT_ROOT / "scripts" / "airflow.sh")
BACKFILL_DAG = "lakehouse_backfill"
SCHEDULER_HEALTH_PORT = script_default("AIRFLOW_HEALTH_PORT")
SERVED_COLUMNS = ["window_start", "bridge_id", "vehicle_type", "vehicles", "revenue", "source"]
SERVED = f"SELECT {', '.join(SERVED_COLUMNS)} FROM gold.toll_traffic ORDER BY 1, 2, 3"
# The long-running services, each on its host as `lakehouse hosts run HOST -- ...` starts it, in two
# rounds: the workers register with the master of the first.
SERVICES = (
    {"storage": ("s3", "start"), "kafka": ("kafka", "start"), "spark-master": ("cluster", "start", "--role", "master")},
    {"worker-1": ("cluster", "start", "--role", "worker"), "worker-2": ("cluster", "start", "--role", "worker")},
)


def _instant(text: str):
    from lakehouse.eventtime import parse_instant

    return parse_instant(text, "time")


def _straggler(start: datetime, event_id: str = "straggler") -> str:
    """A valid event in the range's first window (closed by the stream's watermark), received late."""
    moment = f"{start + timedelta(seconds=30):%Y-%m-%dT%H:%M:%S}Z"
    return json.dumps(
        {"event_id": event_id, "bridge_id": "bridge-00", "booth_id": "bridge-00-booth-0", "vehicle_type": "car",
         "axles": 2, "toll_amount": 6.0, "event_time": moment, "sent_at": moment}
    )  # fmt: skip


def _embedded_loop(spark, embedded, start, end):
    """The loop's steps on the embedded default, in the tests' session; returns the audit taken
    before the straggler arrived."""
    run_speed_layer(spark, embedded, PIPELINE, available_now=True)
    audit = Auditor(spark, embedded, PIPELINE).reconcile(start, end, record=False)
    LogWriter(embedded, PIPELINE.topic).write(datetime(2026, 1, 5, 9, 30), "straggler", [_straggler(start)])
    run_speed_layer(spark, embedded, PIPELINE, available_now=True)
    if ALL_HOST_FAULTS:  # the record that arrives while the stream host is cut from storage
        LogWriter(embedded, PIPELINE.topic).write(datetime(2026, 1, 5, 9, 31), STALLED, [_straggler(start, STALLED)])
        run_speed_layer(spark, embedded, PIPELINE, available_now=True)
    BatchLayer(spark, embedded, PIPELINE).backfill(start, end, source="log")
    CorrectionRun(spark, embedded, PIPELINE).run()
    return audit


def _cached_on_the_machine(settings) -> None:
    """What the services and jobs download at their first start, fetched here: the hosts have no
    route beyond their subnet."""
    from lakehouse.services.kafka import broker_jars
    from lakehouse.services.s3 import S3PROXY
    from lakehouse.services.spark_service import delta_class_path
    from lakehouse.storage.java import maven_central_jar

    maven_central_jar(S3PROXY)
    maven_central_jar(METASTORE_DRIVER)
    broker_jars()
    delta_class_path(settings)  # the Spark service's; the jobs' JARs are the tests' session's


def _started(
    env: dict[str, str], host: str, *arguments: str, program: str = LAKEHOUSE, **overrides: str
) -> subprocess.Popen:
    """`lakehouse hosts run HOST -- PROGRAM ARGUMENTS`, started (``env`` sets the overrides)."""
    settings = [f"{name}={value}" for name, value in overrides.items()]
    command = [LAKEHOUSE, "hosts", "run", host, "--", "env", *settings, program, *arguments]
    # A session of its own, as a host's process has: a drill ends it whole (killpg), Spark's JVM included.
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.Popen(command, env=env, **pipes, text=True, start_new_session=True)


def _finished(process: subprocess.Popen) -> str:
    """The started command's output once it exited 0."""
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, f"{' '.join(process.args[3:])}: {out[-2000:]}{err[-3000:]}"
    return out


class Loop:
    """The deployment's hosts and what runs on them: each host's home under ``root``, the settings
    every job gets, and this process's view of the same services (by address: the machine's
    ``/etc/hosts`` names no host)."""

    def __init__(self, described: deployment.Deployment, env: dict[str, str], root: Path):
        self.described, self.env, self.root = described, env, root
        self.addresses = {host.name: str(host.address) for host in described.hosts}
        # The Hive metastore's settings, once the metastore host's PostgreSQL is up (its password among them).
        self.metastore: dict[str, str] = {}

    def home(self, host: str) -> Path:
        return self.root / host

    def host_env(self, host: str, **extra: str) -> dict[str, str]:
        return {**self.env, "LAKEHOUSE_HOME": str(self.home(host)), **extra}

    def start_services(self) -> None:
        """Each round's services at once, each as `lakehouse hosts run HOST -- lakehouse ...`."""
        for services in SERVICES:
            # The broker's start creates the topics, with its settings' retention: the log is January 2026's.
            retention = {"LAKEHOUSE_LOG_RETENTION": RETENTION}
            started = [_started(self.host_env(host), host, *command, **retention) for host, command in services.items()]
            for process in started:
                assert json.loads(_finished(process))["up"]

    def job_settings(self) -> dict[str, str]:
        """What every job and client of the loop is given besides what `hosts run` gives: the S3
        server's keys, the tables and checkpoints in its bucket, the topics' retention."""
        key, secret = saved_credentials(self.home("storage") / "s3")
        return {
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "LAKEHOUSE_WAREHOUSE_URI": f"s3a://{BUCKET}/warehouse",
            "LAKEHOUSE_CHECKPOINT_URI": f"s3a://{BUCKET}/checkpoints",
            # Kafka deletes records older than the topic's retention, and the log is January 2026's.
            "LAKEHOUSE_LOG_RETENTION": RETENTION,
            "LAKEHOUSE_BACKFILL_MAX_RANGE": "31d",
            "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
            # Each client logs in to the broker as its role's principal, from the broker's own file.
            "LAKEHOUSE_KAFKA_CREDENTIALS": str(self.home("kafka") / "kafka" / KAFKA_CREDENTIALS),
        }

    def start(self, host: str, *arguments: str, **overrides: str) -> subprocess.Popen:
        """`lakehouse ARGUMENTS` started on the host as a job of the loop, with ``overrides`` of the
        settings `hosts run` gives."""
        env = self.host_env(host, **self.job_settings())
        return _started(env, host, *arguments, **overrides)

    def serve(self) -> subprocess.Popen:
        """`lakehouse serve` started on the spark-service host, its catalog in the metastore host's
        PostgreSQL: the metastore's password in its environment, never on a command line."""
        env = self.host_env("spark-service", **self.job_settings(), **self.metastore)
        return _started(env, "spark-service", "serve", **SERVICE_SETTINGS)

    def on(self, host: str, *arguments: str) -> str:
        """`lakehouse ARGUMENTS` run on the host as a job of the loop; its output."""
        return _finished(self.start(host, *arguments))

    def analyst_login(self) -> dict[str, str]:
        """An analyst of the Spark service on the spark-service host, added as an operator adds one
        there; the variables `lakehouse sql` logs in with, and a password file for beeline (-w): in
        the environment and a file, never a command line."""
        added = _finished(_started(self.host_env("spark-service"), "spark-service", "users", "add", "analyst"))
        password = self.root / "analyst.password"
        password.touch(mode=0o600)
        password.write_text(added.splitlines()[-1])
        return {"LAKEHOUSE_SQL_USER": "analyst", "LAKEHOUSE_SQL_PASSWORD": password.read_text(), "file": str(password)}

    def machine_settings(self):
        """This process's settings for the loop's tables and log, by the hosts' addresses."""
        return make_settings(
            self.root / "machine",
            **self.job_settings(),
            LAKEHOUSE_S3_ENDPOINT=f"http://{self.addresses['storage']}:9000",
            LAKEHOUSE_KAFKA_BOOTSTRAP=f"{self.addresses['kafka']}:9092",
        )

    def reach_the_bucket(self, spark) -> None:
        """Point the tests' session at the storage host for the loop's bucket alone (s3a's per-bucket
        options), its own S3 server keeping every other bucket."""
        settings = self.machine_settings()
        options = {"endpoint": settings.s3_endpoint, "access.key": settings.s3_access_key}
        options["secret.key"] = settings.s3_secret_key
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for option, value in options.items():
            hadoop.set(f"fs.s3a.bucket.{BUCKET}.{option}", value)


class DagRun:
    """A DAG run as the loop's faults see a job: it runs until it ends, well (0) or not (1)."""

    def __init__(self, client: Airflow, dag_id: str, run_id: str):
        self.client, self.dag_id, self.run_id = client, dag_id, run_id

    def poll(self) -> int | None:
        state = self.client.state(self.dag_id, self.run_id)
        return None if state not in FINISHED else int(state == "failed")

    def wait(self, timeout: float) -> int:
        ended = self.client.wait_for(self.dag_id, self.run_id, timeout)
        tasks = {task["task_id"]: task["state"] for task in self.client.task_instances(self.dag_id, self.run_id)}
        assert ended == "success", f"{self.dag_id} run {self.run_id} {ended}: {tasks}"
        return 0


class AirflowOnHosts:
    """Airflow's database on the metastore host and Airflow on the airflow host, each started there
    as an operator starts it (scripts/airflow.sh through `lakehouse hosts run`); a backfill
    triggered through Airflow's REST API, whose task submits it to the cluster."""

    def __init__(self, loop: Loop, homes: Path):
        self.loop, self.homes = loop, homes
        self.starting: subprocess.Popen | None = None

    def start(self) -> dict[str, str]:
        """PostgreSQL on the metastore host, then Airflow started on the airflow host on that database
        (not awaited: it migrates its database meanwhile); returns the settings of the Hive metastore
        the same PostgreSQL holds, for the Spark service (`Loop.serve`)."""
        database_host = self.loop.host_env("metastore", AIRFLOW_HOME=str(self.homes / "metastore"))
        exports = _finished(_started(database_host, "metastore", "metastore", program=AIRFLOW_SCRIPT))
        database = dict(line.removeprefix("export ").replace("'", "").split("=", 1) for line in exports.splitlines())
        # The database's URL, with its password, in the environment: never on a command line.
        env = self.loop.host_env("airflow", **self.loop.job_settings(), AIRFLOW_HOME=str(self.homes / "airflow"))
        env |= {"AIRFLOW_DATABASE_URL": database["AIRFLOW_DATABASE_URL"], "LAKEHOUSE_PIPELINES": PIPELINE.name}
        self.starting = _started(env, "airflow", "start", program=AIRFLOW_SCRIPT)
        return {name: value for name, value in database.items() if name.startswith("LAKEHOUSE_METASTORE_")}

    def trigger_backfill(self, start: str, end: str) -> DagRun:
        """The backfill of [start, end) from the log, triggered by the operator through the REST API
        of the api-server on the airflow host, from this machine."""
        assert "Airflow is up" in _finished(self.starting)
        passwords = json.loads((self.homes / "airflow" / "passwords.json").read_text())
        port = self.loop.described.ports[DeployedService.AIRFLOW_API_SERVER]["api"]
        api = f"http://{self.loop.addresses['airflow']}:{port}"
        admin = Airflow(api, passwords["admin"])
        wait_for_dags(admin)
        admin.unpause(BACKFILL_DAG)
        operator = Airflow(api, passwords["operator"], "operator")
        conf = {"pipeline": PIPELINE.name, "start": start, "end": end, "source": Source.LOG, "chunk": "1h"}
        return DagRun(operator, BACKFILL_DAG, operator.trigger(BACKFILL_DAG, conf | {"dry_run": False}))


@contextlib.contextmanager
def _airflow_homes(logs: Path) -> Iterator[Path]:
    """The homes of Airflow and its database on their hosts, removed at the end, Airflow's logs kept
    in ``logs``: PostgreSQL runs as its own user, which must be able to enter its cluster's folder
    (a test's own it cannot)."""
    homes = PROJECT_ROOT / ".cache" / f"across-hosts-{os.getpid()}"
    try:
        yield homes
    finally:
        for folder in ("logs", "process-logs"):
            with contextlib.suppress(OSError):
                shutil.copytree(homes / "airflow" / folder, logs / folder)
        shutil.rmtree(homes, ignore_errors=True)


def test_the_loop_across_hosts_gives_the_embedded_defaults_tables_and_serving_view(spark, tmp_path):
    start, end = map(_instant, WINDOW_RANGE)
    embedded = make_settings(tmp_path / "embedded")
    written = generate(embedded, CONFIG)
    embedded_audit = _embedded_loop(spark, embedded, start, end)
    register_tables(spark, embedded)
    expected = [tuple(row) for row in spark.sql(SERVED).collect()]
    assert {row[-1] for row in expected} == {"batch"}  # the backfilled range is served by the batch layer
    _cached_on_the_machine(embedded)
    # The hosts go down first (the database's server with them), then its home is removed.
    with _airflow_homes(tmp_path / "airflow") as airflow_homes, own_deployment(tmp_path) as (described, env):
        loop = Loop(described, env, tmp_path)
        lakehouse(env, "hosts", "up")
        loop.start_services()
        airflow = AirflowOnHosts(loop, airflow_homes)
        loop.metastore = airflow.start()
        loop.reach_the_bucket(spark)
        on_hosts = loop.machine_settings()
        service = _run_the_jobs(spark, loop, airflow, embedded_audit, written.records)
        analyst = {**loop.host_env("analyst", **loop.job_settings()), **loop.analyst_login()}
        assert _query_from_the_analyst(loop, service, analyst) == format_rows(SERVED_COLUMNS, expected, "csv")
        # The service's catalog is the metastore host's, which a restarted service finds again.
        assert {"gold.toll_traffic__speed", "bronze.toll_traffic_events"} <= set(metastore_tables(loop.metastore))
        if ALL_HOST_FAULTS:
            _restart_the_service_host(loop, analyst, format_rows(SERVED_COLUMNS, expected, "csv"))
        assert Auditor(spark, on_hosts, PIPELINE).reconcile(start, end, target="serving", record=False).ok
        for table in (TABLES.bronze, TABLES.quarantine, TABLES.speed, TABLES.batch, TABLES.panes):
            drop = {"source_file", "emitted_at"}
            assert rows(spark, on_hosts, table, drop) == rows(spark, embedded, table, drop), table.qualified_name
        _check_locators(spark, on_hosts, written.records + ADDED_RECORDS)
        _check_bound_to_their_hosts(loop)
        _check_every_app_ran_on_both_workers(loop)
        if JVM_FREE_RUNS:
            _run_the_jvm_free_commands_from_the_analyst(loop)
        pids = _service_pids(loop)
        removed = json.loads(lakehouse(env, "hosts", "down").stdout.removeprefix("hosts down: removed "))
        assert removed["processes"] >= len(pids) and removed["namespaces"] == len(described.hosts), removed
        assert leftovers(described.prefix) == [] and not any(running(pid) for pid in pids)


# The service answers from its own driver: on the cluster it would hold every core (a standalone
# application takes all unless capped), and the jobs would wait. Exact answers: it starts before the
# jobs' last commits, which its SQL would otherwise see up to 2 s late.
SERVICE_SETTINGS = {"LAKEHOUSE_SPARK_MASTER": "local[2]", "LAKEHOUSE_SQL_STALENESS": "0s"}


def _run_the_jobs(spark, loop: Loop, airflow: AirflowOnHosts, embedded_audit, records: int) -> subprocess.Popen:
    """The producer on the analyst host (``records`` records); the stream on the stream host, killed
    after its first batch's MERGE and restarted, a late record, the stream again; the backfill through
    Airflow (worker-1 cut while it runs) and the correction from the airflow host. The Spark service
    starts on its host meanwhile: the starting `serve`."""
    config = ("events", "seed", "rate", "late_fraction", "late_delay", "duplicate_fraction", "malformed_fraction")
    options = [(f"--{name.replace('_', '-')}", str(getattr(CONFIG, name))) for name in config]
    loop.on("analyst", "generate", "--sink", "kafka", *(part for option in options for part in option))
    settings = loop.machine_settings()
    # The kill: tests/test_kafka.py's reasoning holds (commit 1 of __speed is batch 0's MERGE).
    stream_env = loop.host_env("stream", **loop.job_settings())
    kill_after(settings, stream_env, TABLES.speed, 1, on=(LAKEHOUSE, "hosts", "run", "stream", "--"))
    progress = arrow_at(STREAM_PROGRESS.uri(settings), settings=settings)
    assert progress is None or progress.num_rows == 0, "the kill fell after the batch's progress row"
    restarted = loop.start("stream", "stream", "--available-now")  # it replays that batch
    if ALL_HOST_FAULTS:
        _restart_kafka_while(loop, restarted)
    _finished(restarted)
    service = loop.serve()
    _check_kafka_audit(spark, settings, embedded_audit)
    if ALL_HOST_FAULTS:
        _stall_the_stream_from_storage(loop, settings, records)
    else:
        loop.on("stream", "stream", "--available-now")
    _cut_a_worker_while(loop, airflow.trigger_backfill(*WINDOW_RANGE), "airflow")
    loop.on("airflow", "correct")
    return service


def _cut_a_worker_while(loop: Loop, job: DagRun, driver_host: str) -> None:
    """Once the job's driver (on ``driver_host``) has run a task on its executor on worker-1,
    worker-1 is cut off the network for CUT_SECONDS (`lakehouse hosts cut`), and the job still ends
    well. Prints when the job ended, from the cut's start."""
    worker = loop.addresses["worker-1"]
    _await_while_it_runs(job, lambda: _tasks_ran_on(loop, driver_host, worker), "ran a task on worker-1")
    cutting = subprocess.Popen(
        [LAKEHOUSE, "hosts", "cut", "worker-1", "--seconds", str(CUT_SECONDS)], env=loop.env, stdout=subprocess.PIPE
    )
    cut_at = time.monotonic()
    assert job.wait(timeout=600) == 0
    ended = time.monotonic() - cut_at
    assert cutting.wait(timeout=CUT_SECONDS + 60) == 0
    print(
        f"\nworker-1 cut for {CUT_SECONDS} s while the job ran on it; the job ended {ended:.0f} s after the cut began"
    )


def _restart_kafka_while(loop: Loop, job: subprocess.Popen) -> None:
    """Once the job's application runs on the cluster, the kafka host restarts: its broker is
    SIGKILLed, as a host's power cut ends it, and started again from its own storage; the job still
    ends well. Prints how long the broker was down and when the job ended."""
    master = _master_web_ui(loop)
    _await_while_it_runs(job, lambda: _master_state(master)["activeapps"], "its application ran")
    broker = int((loop.home("kafka") / "kafka" / "broker.pid").read_text())
    os.kill(broker, signal.SIGKILL)
    killed_at = time.monotonic()
    until(lambda: not running(broker), 30, "the broker's end")  # a host boots once its processes are gone
    started = _started(loop.host_env("kafka"), "kafka", "kafka", "start", LAKEHOUSE_LOG_RETENTION=RETENTION)
    assert json.loads(_finished(started))["up"]
    down = time.monotonic() - killed_at
    _finished(job)
    ended = time.monotonic() - killed_at
    print(f"\nthe broker was down {down:.0f} s while the stream read; the stream ended {ended:.0f} s after the kill")


def _stall_the_stream_from_storage(loop: Loop, settings: Settings, records: int) -> None:
    """The stream runs, watched by Prometheus and the Alertmanager on the monitor host, which send to
    a webhook receiver on the machine; once it has read the straggler, the stream host is cut from
    the storage host for STALL_SECONDS (`lakehouse hosts cut stream --from storage`) and a record
    arrives meanwhile. The stall alert reaches the receiver during the cut; after it, the stream
    reads the record by itself and the alert resolves. The stream is then SIGKILLed, as every
    stream of the loop ends (the table comparison proves nothing lost or doubled). Prints when."""
    with webhook_receiver(str(loop.described.machine)) as (url, notifications):
        monitor = loop.host_env("monitor", LAKEHOUSE_ALERT_WEBHOOK_URL=url, **WATCHED_PACE)
        for server in ("alertmanager", "prometheus"):
            assert json.loads(_finished(_started(monitor, "monitor", server, "start")))["up"]
        prometheus = f"http://{loop.addresses['monitor']}:{loop.described.ports[DeployedService.PROMETHEUS]['web']}"
        stream = loop.start("stream", "stream", **WATCHED_PACE)
        try:
            until(lambda: _read(settings) == records + 1, 300, "the straggler read", stream)
            until(lambda: _target_up(prometheus, STREAM_JOB), 60, "Prometheus scraping the stream", stream)
            # Airflow's metrics too, from its StatsD exporter on the airflow host.
            until(lambda: _target_up(prometheus, AIRFLOW_JOB), 60, "Prometheus scraping Airflow", stream)
            _stall_and_resume(loop, settings, stream, notifications, records)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(stream.pid, signal.SIGKILL)
            stream.wait()


def _stall_and_resume(
    loop: Loop, settings: Settings, stream: subprocess.Popen, notifications: list[dict], records: int
) -> None:
    """The drill's cut, the record sent meanwhile, and what the receiver and the tables see."""
    target = {"instance": loop.described.client_environment()["LAKEHOUSE_PROMETHEUS_STREAM_TARGETS"]}
    cut = [LAKEHOUSE, "hosts", "cut", "stream", "--from", "storage", "--seconds", str(STALL_SECONDS)]
    cutting = subprocess.Popen(cut, env=loop.env, stdout=subprocess.PIPE)
    until(lambda: _path_lost(loop, "stream", "storage"), 30, "the cut in place")
    cut_at = time.monotonic()
    start = _instant(WINDOW_RANGE[0])
    KafkaLogWriter(settings, PIPELINE.topic).append([(datetime(2026, 1, 5, 9, 31), _straggler(start, STALLED))], "late")
    fired = until(lambda: stall_notification(notifications, "firing", **target), STALL_SECONDS, "the stall alert")
    alerted = time.monotonic() - cut_at
    # Named by its address: the endpoint that labels the stream's samples with its pipeline is out of reach.
    assert fired["annotations"]["summary"] == f"The speed layer at {target['instance']} has stalled", fired
    assert _read(settings) == records + 1, "the stream read the record while cut from storage"
    assert cutting.wait(timeout=STALL_SECONDS + 60) == 0
    back_at = time.monotonic()
    until(lambda: _read(settings) == records + 2, 300, "the stalled record read", stream)
    resumed = time.monotonic() - back_at
    resolved = until(lambda: stall_notification(notifications, "resolved", **target), 120, "the alert resolved")
    assert resolved["fingerprint"] == fired["fingerprint"]
    print(
        f"\nthe stream host cut from storage for {STALL_SECONDS} s: the stall alert reached the receiver "
        f"{alerted:.0f} s into the cut; the stream read the record {resumed:.0f} s after the cut and the alert "
        f"resolved {time.monotonic() - back_at:.0f} s after it"
    )


def _path_lost(loop: Loop, host: str, other: str) -> bool:
    """Whether ``host`` sends its packets for ``other`` nowhere (`hosts cut --from`'s neighbour entry)."""
    namespace = loop.described.namespace(loop.described.host(host))
    shown = subprocess.run(["ip", "-n", namespace, "neigh", "show", loop.addresses[other]], capture_output=True)
    return b"PERMANENT" in shown.stdout


def _read(settings: Settings) -> int:
    """How many records the stream's batches have read, by its progress table."""
    progress = arrow_at(STREAM_PROGRESS.uri(settings), settings=settings)
    return 0 if progress is None else sum(progress.column("input_rows").to_pylist())


def _target_up(prometheus: str, job: str) -> bool:
    """Whether Prometheus's last scrape of the job's one endpoint succeeded."""
    scraped = prometheus_api(prometheus, "query", query=f'up{{job="{job}"}}')["result"]
    return [series["value"][1] for series in scraped] == ["1"]


def _await_while_it_runs(job: subprocess.Popen | DagRun, happened, what: str, seconds: float = 300) -> None:
    """Wait, at most ``seconds``, until ``happened()`` while ``job`` still runs: a fault is made on a
    job at work, never on one that has ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and job.poll() is None and not happened():
        time.sleep(0.2)
    assert job.poll() is None, f"the job ended before it {what}"


def _tasks_ran_on(loop: Loop, driver_host: str, worker: str) -> bool:
    """Whether the driver on ``driver_host`` has an executor at ``worker``'s address that has run a
    task or runs one, by the driver's own account (its UI's REST API on the host's address)."""
    ui = f"http://{loop.addresses[driver_host]}:4040/api/v1/applications"
    try:
        with urllib.request.urlopen(ui, timeout=2) as response:
            application = json.loads(response.read())[0]["id"]
        with urllib.request.urlopen(f"{ui}/{application}/executors", timeout=2) as response:
            executors = json.loads(response.read())
    except (OSError, IndexError, KeyError, ValueError):  # the driver or its UI not up yet
        return False
    return any(
        executor["hostPort"].startswith(f"{worker}:") and executor["totalTasks"] + executor["activeTasks"] > 0
        for executor in executors
    )


def _master_web_ui(loop: Loop) -> str:
    host = loop.host_env("spark-master")
    return json.loads(lakehouse(host, "hosts", "run", "spark-master", "--", LAKEHOUSE, "cluster", "status").stdout)[
        "web_ui"
    ]


def _master_state(master: str) -> dict:
    """The Spark master's own account of its workers and applications (its web UI's JSON)."""
    with urllib.request.urlopen(f"{master}/json/", timeout=10) as response:
        return json.loads(response.read())


def _query_from_the_analyst(loop: Loop, service: subprocess.Popen, analyst: dict[str, str]) -> str:
    """The serving view from the analyst host, through the Spark service on the spark-service host
    once it is up: over Spark Connect (`lakehouse sql`, sent to the service by `hosts run`'s
    LAKEHOUSE_SQL_ROUTE) and over JDBC (beeline, over TLS), the same rows; as CSV."""
    assert json.loads(_finished(service))["up"]
    connect = _finished(_started(analyst, "analyst", "sql", SERVED, "--format", "csv"))
    trust_store = ServiceState.of(Settings.from_env(loop.host_env("spark-service"))).authority.trust_store
    url = jdbc_url("spark-service", loop.described.ports[DeployedService.SPARK_SERVICE]["thrift"], trust_store)
    credentials = ("-n", analyst["LAKEHOUSE_SQL_USER"], "-w", analyst["file"])
    jdbc = lakehouse(loop.env, "hosts", "run", "analyst", "--", *beeline_command(url, SERVED, *credentials)).stdout
    assert _beeline_rows(jdbc) == connect.splitlines(), jdbc
    return connect


def _restart_the_service_host(loop: Loop, analyst: dict[str, str], answer: str) -> None:
    """The spark-service host restarts: the service's processes are SIGKILLed, as a power cut ends
    them, and the host's boot starts the service again as the loop first did. The analyst asking
    meanwhile gets one line; once it is up, the same answer, with nothing done by hand on either
    side. Prints the line and how long the service was gone."""
    files = ServiceState.of(Settings.from_env(loop.host_env("spark-service")))
    os.killpg(int(files.process.pid_file.read_text()), signal.SIGKILL)
    killed_at = time.monotonic()
    asked = _started(analyst, "analyst", "sql", SERVED, "--format", "csv")
    out, err = asked.communicate(timeout=300)
    said = [line for line in err.splitlines() if line.strip()]
    assert asked.returncode != 0 and not out and len(said) == 1, err[-3000:]
    assert said[0].startswith("lakehouse: error: the Spark service does not answer"), said
    assert json.loads(_finished(loop.serve()))["up"]
    gone = time.monotonic() - killed_at
    assert _finished(_started(analyst, "analyst", "sql", SERVED, "--format", "csv")) == answer
    print(f"\nthe spark-service host restarted; meanwhile the analyst read: {said[0]}")
    print(f"it answered again {gone:.0f} s after the kill")


def _beeline_rows(out: str) -> list[str]:
    """beeline's csv2 rows, header first, its timestamps as Python prints them (no ".0")."""
    lines = (line.split("> ", 1)[1] if line.startswith("0: jdbc:") else line for line in out.splitlines())
    return [re.sub(r"(\d\d:\d\d:\d\d)\.0\b", r"\1", line) for line in lines if line]


def _check_kafka_audit(spark, settings, on_files) -> None:
    """The audit pins the topic by its end offsets and explains every difference as on the file log;
    a record the stream has not read yet is explained as such; the first pins read the same again."""
    start, end = map(_instant, WINDOW_RANGE)
    first = Auditor(spark, settings, PIPELINE).reconcile(start, end, record=False)
    assert first.ok and first.matched > 0 and _verdicts(first) == _verdicts(on_files), first
    assert first.pins["log_until"].startswith('kafka:{"0": ')
    KafkaLogWriter(settings, PIPELINE.topic).append([(datetime(2026, 1, 5, 9, 30), _straggler(start))], "late")
    later = Auditor(spark, settings, PIPELINE).reconcile(start, end, record=False)
    assert later.ok and later.explained["not_yet_read"] == 1, later
    again = Auditor(spark, settings, PIPELINE).reconcile(start, end, pins=first.pins, record=False)
    assert _verdicts(again) == _verdicts(first)


def _verdicts(audit) -> tuple:
    return audit.windows_compared, audit.matched, audit.explained, audit.unexplained


def _check_locators(spark, settings, records: int) -> None:
    """Bronze and quarantine keep each record's locator, a partition and an offset instead of a file;
    each batch records the last offset it read in each partition, and every record has a fate."""
    for table in (TABLES.bronze, TABLES.quarantine):
        located = spark.read.format("delta").load(table.uri(settings)).select("source_file").collect()
        assert all(row[0].startswith("kafka:toll_traffic/partition=") for row in located)
    progress = spark.read.format("delta").load(STREAM_PROGRESS.uri(settings)).collect()
    fates = ("quarantined", "duplicates", "on_time", "late")
    assert sum(row["input_rows"] for row in progress) == sum(row[f] for row in progress for f in fates) == records
    units = [unit for row in progress for unit in row["source_files"]]
    assert units and all(unit.startswith("kafka:toll_traffic/partition=") for unit in units)


def _listening(loop: Loop, host: str) -> list[tuple[str, int, int | None]]:
    """Each TCP socket listening on the host: its address (an IPv4 address mapped into IPv6, as Java
    binds one, read as the IPv4 address), its port and the pid of its process."""
    listening = []
    for line in on_host(loop.described, host, "ss", "-ltnpH").stdout.splitlines():
        bound, port = line.split()[3].rsplit(":", 1)
        pid = re.search(r"pid=(\d+)", line)
        listening.append((re.sub(r"^\[(::ffff:)?|\]$", "", bound), int(port), int(pid.group(1)) if pid else None))
    return listening


def _service_processes(loop: Loop) -> set[int]:
    """The Spark service's Python process and its children (its driver's JVM)."""
    server = int((loop.home("spark-service") / "service" / "server.pid").read_text())
    children = {int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _parent(stat) == server}
    return {server, *children}


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _check_bound_to_their_hosts(loop: Loop) -> None:
    """Every socket listening on a host is on its address, but, on loopback, the Spark service's
    driver's own, between its Python and its JVM (py4j), and the Airflow scheduler's health check,
    its supervisor's liveness probe on the same host; each port the description gives the services
    the loop runs answers on the host's address and not on its loopback."""
    service = _service_processes(loop)
    for host in loop.described.hosts:
        address, listening = loop.addresses[host.name], _listening(loop, host.name)
        allowed = service if host.name == "spark-service" else set()
        local = {SCHEDULER_HEALTH_PORT} if host.name == "airflow" else set()
        others = [(bound, port, pid) for bound, port, pid in listening if bound != address]
        assert all(bound == LOOPBACK and (pid in allowed or port in local) for bound, port, pid in others), (
            host.name,
            listening,
        )
    for name in (*SERVICES[0], "spark-service", "metastore", "airflow"):
        host = loop.described.host(name)
        for port in loop.described.host_ports(host):
            assert answers(loop.described, name, str(host.address), port), (name, port)
            assert not answers(loop.described, name, LOOPBACK, port), (name, port)
    assert all(_listening(loop, name) for name in ("spark-master", "worker-1", "worker-2", "spark-service"))


def _check_every_app_ran_on_both_workers(loop: Loop) -> None:
    """The master counts both workers, at their hosts' addresses; every job ran on executors of
    both (one core each) to its end, but the backfill that worker-1's cut fell on: when the cut
    outlasted the master's worker timeout (60 s, heartbeats every 15 s), the master took worker-1's
    executor away and the job ended on worker-2's core (it had run on worker-1's before the cut).
    Prints which."""
    state = _master_state(_master_web_ui(loop))
    assert sorted(worker["host"] for worker in state["workers"]) == [
        loop.addresses["worker-1"],
        loop.addresses["worker-2"],
    ]
    cores = {app["id"]: (app["name"], app["cores"]) for app in state["completedapps"]}
    cut = [app["cores"] for app in state["completedapps"] if app["name"] == f"backfill-{PIPELINE.name}"]
    others = [app["cores"] for app in state["completedapps"] if app["name"] != f"backfill-{PIPELINE.name}"]
    assert len(cut) == 1 and cut[0] in (1, 2) and len(others) >= 4 and set(others) == {2}, cores
    assert state["activeapps"] == []
    print(f"\nthe backfill under the cut ended with {cut[0]} of its 2 executors' cores")


def _service_pids(loop: Loop) -> list[int]:
    """The pids of the services the loop started, from their homes' files."""
    files = [("storage", "s3/s3proxy.pid"), ("storage", "dynamodb/dynamodb.pid"), ("kafka", "kafka/broker.pid")]
    files.append(("spark-service", "service/server.pid"))
    pids = [int((loop.home(host) / name).read_text()) for host, name in files]
    for host in ("spark-master", "worker-1", "worker-2"):
        pids += json.loads((loop.home(host) / "cluster" / "pids.json").read_text()).values()
    return pids


def _run_the_jvm_free_commands_from_the_analyst(loop: Loop) -> None:
    """`health`, `status` and `dim apply` (a change applied, and a rewrite refused), JVM_FREE_RUNS
    times each, from the analyst host on the loop's tables on the storage host, each run through
    the CLI and the interpreter's exit (tests/exit_loop.py): every run of a command ends alike, and
    none by a signal. Prints how they ended."""
    folder = loop.root / "jvm-free"
    folder.mkdir()
    settings = make_settings(loop.home("analyst"), **loop.job_settings())
    # Health's verdict stays the same however long the loops take: the stream ended minutes ago.
    store = Store({**loop.job_settings(), "LAKEHOUSE_STREAM_MAX_STALENESS": "30d"}, JVM_FREE_RUNS)
    deployment_path = f"LAKEHOUSE_DEPLOYMENT={loop.env['LAKEHOUSE_DEPLOYMENT']}"
    launcher = ("env", deployment_path, LAKEHOUSE, "hosts", "run", "analyst", "--")
    # A bridge's first version long after the loop's events, applied from this machine; the loops
    # then add later versions of it, or try to rewrite that one.
    first = datetime(2027, 1, 1, tzinfo=UTC)
    apply_change_file(loop.machine_settings(), get_dimension("bridges"), change_log(folder / "first.jsonl", first))
    for run in range(JVM_FREE_RUNS):
        change_log(folder / f"move-{run}.jsonl", first + timedelta(hours=run + 1), zone=f"s{run}")
    loops = {
        "health": ["health", "--pipeline", PIPELINE.name],
        "status": ["status", "--pipeline", PIPELINE.name],
        "dim-applied": ["dim", "apply", str(folder / "move-{i}.jsonl")],
        "dim-refused": ["dim", "apply", str(change_log(folder / "rewrite.jsonl", first, region="north"))],
    }
    ended = {name: run_loop(folder, settings, name, argv, store, launcher) for name, argv in loops.items()}
    print(f"\n{JVM_FREE_RUNS} runs of each JVM-free command from the analyst host: {json.dumps(ended)}")
    assert all(len(endings) == 1 and "signal" not in next(iter(endings)) for endings in ended.values()), ended
    assert ended["dim-applied"] == {"exit 0": JVM_FREE_RUNS} and ended["dim-refused"] == {"exit 2": JVM_FREE_RUNS}
    assert lines(folder, "dim-refused", "err")[-1].startswith("lakehouse: error: dim.bridges: bridge-01 already has")
