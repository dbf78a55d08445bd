"""One settings object for every entry point, chosen by environment variables.

Every location is a URI in Spark's spelling (``file:/...`` locally, ``s3a://bucket/prefix`` on a
cluster; lakehouse.location spells it for other clients), so the same code runs against local disk
and object storage. Paths are derived from ``LAKEHOUSE_HOME`` unless overridden one by one. The
fields come in groups (paths, Spark, stream tuning, orchestration, services), a record each.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_duration
from lakehouse.location import local_path, to_uri
from lakehouse.vocabulary import S3Commits, SqlRoute, choices

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Where the services `lakehouse` starts listen on one machine (LAKEHOUSE_BIND_ADDRESS).
LOOPBACK = "127.0.0.1"


def is_checkout(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and (folder / "lakehouse" / "settings.py").is_file()


def _default_home() -> Path:
    """The ignored ``.lakehouse/`` of the checkout a command runs in; run from elsewhere, that of the
    checkout the code comes from, or the working directory's when the code is installed elsewhere."""
    for base in (Path.cwd(), PROJECT_ROOT):
        if is_checkout(base):
            return base / ".lakehouse"
    return Path.cwd() / ".lakehouse"


# The fields read as they are from LAKEHOUSE_<FIELD>, stripped of spaces, or as whole numbers.
_DURATION_FIELDS = (
    "trigger_interval",
    "dedupe_horizon",
    "unterminated_file_grace",
    "backfill_max_range",
    "log_retention",
    "vacuum_retention",
    "audit_replay_window",
    "data_docs_retention",
    "stream_max_staleness",
    "stream_lag_tolerance",
    "batch_lateness_delay",
    "sql_staleness",
    "prometheus_scrape_interval",
    "alert_group_wait",
    "alert_group_interval",
)
_TEXT_FIELDS = (
    "spark_master",
    "driver_memory",
    "ivy_dir",
    "metastore_password",
    "kafka_password",
    "sql_password",
    "max_bytes_per_trigger",
    "metrics_port",
    "alert_for",
    *_DURATION_FIELDS,
)
# Read by name rather than from a field of the same name (Settings.from_env).
_NAMED_VARIABLES = (
    "LAKEHOUSE_HOME",
    "LAKEHOUSE_LOG_URI",
    "LAKEHOUSE_WAREHOUSE_URI",
    "LAKEHOUSE_CHECKPOINT_URI",
    "LAKEHOUSE_WATERMARK_DELAY",
    "LAKEHOUSE_ALLOWED_LATENESS",
    "LAKEHOUSE_SPARK_PACKAGES",
    "LAKEHOUSE_PIPELINES",
)
# The file in the broker's folder (Paths.kafka_dir) with its principals' passwords.
KAFKA_CREDENTIALS = "credentials.json"
# A TLS listener's authority (lakehouse.services.certificates): in this folder of its service's, this file.
TLS_FOLDER, AUTHORITY_CERTIFICATE = "tls", "ca.crt"
_SIZE = re.compile(r"^(\d+)\s*([kmg]?)b?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in a size such as ``256m``, ``64k``, ``1g`` or ``1048576`` (powers of 1024)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise LakehouseError(f"cannot read size {text!r}: use a whole number of bytes, or one ending in k, m or g")
    number, unit = match.groups()
    return int(number) * 1024 ** " kmg".index(unit.lower() or " ")


_STRIPPED_FIELDS = (
    "project",
    "driver_java_options",
    "class_archive",
    "metastore_url",
    "metastore_user",
    "sql_route",
    "sql_user",
    "spark_remote",
    "spark_remote_token",
    "kafka_bootstrap",
    "kafka_topic_prefix",
    "kafka_user",
    "kafka_credentials",
    "kafka_ca",
    "s3_endpoint",
    "s3_commits",
    "s3_commit_table",
    "s3_commit_endpoint",
    "bind_address",
    "deployment",
    "alert_webhook_url",
    "alertmanager_config",
    "prometheus_stream_targets",
    "prometheus_airflow_targets",
)
_PORT_FIELDS = (
    "connect_port",
    "thrift_port",
    "kafka_port",
    "cluster_port",
    "s3_port",
    "prometheus_port",
    "alertmanager_port",
    "dynamodb_port",
)
_INTEGER_FIELDS = (
    "shuffle_partitions",
    "max_files_per_trigger",
    "max_offsets_per_trigger",
    "stream_lag_batches",
    *_PORT_FIELDS,
)


@dataclasses.dataclass(frozen=True)
class Paths:
    """Where the data lives (URIs in Spark's spelling, lakehouse.location) and the home's folders
    for the processes ``lakehouse`` starts."""

    home: str
    log_uri: str
    warehouse_uri: str
    checkpoint_uri: str

    def table_uri(self, schema: str, name: str) -> str:
        return f"{self.warehouse_uri}/{schema}/{name}"

    def pipeline_log_uri(self, pipeline: str) -> str:
        return f"{self.log_uri}/{pipeline}"

    def speed_checkpoint_uri(self, pipeline: str) -> str:
        return f"{self.checkpoint_uri}/{pipeline}/speed"

    def service_dir(self) -> Path:
        """Where the Spark service keeps its state file, its log and its private configuration."""
        return local_path(self.home) / "service"

    def cluster_dir(self) -> Path:
        """Where the standalone cluster keeps its pids, ports, logs and workers' folders."""
        return local_path(self.home) / "cluster"

    def kafka_dir(self) -> Path:
        """Where the broker of ``lakehouse kafka start`` keeps its configuration, data and log."""
        return local_path(self.home) / "kafka"

    def s3_dir(self) -> Path:
        """Where the S3 server of ``lakehouse s3 start`` keeps its configuration, objects and log."""
        return local_path(self.home) / "s3"

    def metrics_dir(self) -> Path:
        """Where each stream writes the address of its metrics endpoint, which Prometheus discovers."""
        return local_path(self.home) / "metrics"

    def prometheus_dir(self) -> Path:
        """Where the Prometheus of ``lakehouse prometheus start`` keeps its configuration, data and log."""
        return local_path(self.home) / "prometheus"

    def alertmanager_dir(self) -> Path:
        """Where the Alertmanager of ``lakehouse alertmanager start`` keeps its configuration, data, log
        and the address Prometheus sends alerts to."""
        return local_path(self.home) / "alertmanager"

    def dynamodb_dir(self) -> Path:
        """Where the DynamoDB-compatible server ``lakehouse s3 start`` runs keeps its port and log."""
        return local_path(self.home) / "dynamodb"


@dataclasses.dataclass(frozen=True)
class SparkTuning:
    """The JVM and the session every job starts."""

    spark_master: str = "local[2]"
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    # Extra options for the driver JVM (local mode: the only JVM); short jobs on small data may prefer
    # a quick-starting JIT (docs/operations.md, "Short jobs").
    driver_java_options: str = ""
    # The class-data sharing archive ``make setup`` makes (lakehouse.class_archive); empty: none.
    class_archive: str = str(PROJECT_ROOT / ".cache" / "jvm" / "classes.jsa")
    ivy_dir: str = str(PROJECT_ROOT / ".cache" / "ivy")
    extra_packages: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class StreamTuning:
    """How the speed layer reads the log: micro-batch size and pace, and its lateness."""

    trigger_interval: str = "5s"
    # Files per micro-batch for the speed layer (0: no limit). Bounds batch size, and with 1 makes
    # batch boundaries, and so the watermark, reproducible file by file.
    max_files_per_trigger: int = 0
    # Otherwise its new files add up to at most this (a larger file is taken alone): a backlog is read
    # in batches of bounded size, not all at once (0: no limit).
    max_bytes_per_trigger: str = "256m"
    # The same bound on a Kafka log: records per micro-batch (0: no limit).
    max_offsets_per_trigger: int = 500_000
    # How far (in event time) the speed layer searches bronze for an earlier copy of an event id: a
    # copy carries the original's event time, and the horizon bounds each micro-batch's bronze scan.
    dedupe_horizon: str = "1h"
    # How long a batch waits for a local log file's last line to end (docs/design.md, "Validation").
    unterminated_file_grace: str = "30s"
    # Per-run overrides of the pipeline's declared lateness (None: the pipeline's own).
    watermark_delay: str | None = None
    allowed_lateness: str | None = None


@dataclasses.dataclass(frozen=True)
class Orchestration:
    """Airflow's DAGs, maintenance and health checks."""

    # The project folder whose pipelines every command, DAG and the Spark service run (docs/pipelines.md;
    # empty: the shipped examples at the checkout's root).
    project: str = ""
    # The pipelines the scheduled DAGs run (empty: every pipeline of the project).
    pipelines: tuple[str, ...] = ()
    # The longest range one backfill may recompute, and how far back the retained log reaches.
    backfill_max_range: str = "31d"
    log_retention: str = "30d"
    # VACUUM keeps removed files this long; never below what audit replays (--pins) and Delta's
    # own 7-day safety need (see lakehouse.storage.maintenance.vacuum_retention).
    vacuum_retention: str = "7d"
    audit_replay_window: str = "7d"
    # The Data Docs keep each audit's validation pages this long (audit.data_quality keeps every
    # outcome): GX's index reads every stored result at each audit.
    data_docs_retention: str = "90d"
    # Stale when the last micro-batch started longer ago than this; falling behind when the lag grew
    # over this many micro-batches in a row, past the tolerance (lakehouse.ops.health).
    stream_max_staleness: str = "15m"
    stream_lag_batches: int = 5
    stream_lag_tolerance: str = "30s"
    # The scheduled batch layer recomputes an hour once this much lateness has had time to arrive.
    batch_lateness_delay: str = "15m"


@dataclasses.dataclass(frozen=True)
class Services:
    """The Spark service (lakehouse serve; docs/sql.md), the Kafka log, the cluster and S3."""

    # Its Spark Connect and Thrift (JDBC/ODBC) ports on loopback; 0 picks a free one at start.
    connect_port: int = 15002
    thrift_port: int = 10000
    # The Hive metastore in PostgreSQL that keeps the service's catalog across restarts (a JDBC URL;
    # empty: the service keeps its catalog in memory and registers the tables again at each start).
    metastore_url: str = ""
    metastore_user: str = ""
    metastore_password: str = dataclasses.field(default="", repr=False)
    # auto: lakehouse sql goes through this home's service when it is up; embedded; or sc://host:port.
    sql_route: str = SqlRoute.AUTO
    # Who `lakehouse sql` logs in to the service as, and their secret (`lakehouse users add` prints it):
    # read from the environment, never from the command line, where `ps` would show it.
    sql_user: str = ""
    sql_password: str = dataclasses.field(default="", repr=False)
    # How old a table's state the service's SQL may answer from while Delta refreshes it in the
    # background (other processes' commits); its own writes are seen at once, jobs read exact.
    sql_staleness: str = "2s"
    # Jobs as Spark Connect clients of a service (sc://host:port) instead of a JVM each; they write
    # with its write token (this one, or the service's write-token file in this home).
    spark_remote: str = ""
    spark_remote_token: str = dataclasses.field(default="", repr=False)
    # --- The retained log on Kafka (docs/operations.md, "Kafka") ---
    # host:port of the brokers; empty keeps the file log under log_uri.
    kafka_bootstrap: str = ""
    # Put before each pipeline's topic name, so that deployments (or tests) share a cluster.
    kafka_topic_prefix: str = ""
    # The port of the broker `lakehouse kafka start` runs on loopback (0: any free one).
    kafka_port: int = 9092
    # Who a Kafka client is (SASL/SCRAM-SHA-512; lakehouse.storage.kafka_auth): this user and password
    # for every client of the process; unset, each client's role's principal from the credentials file
    # (empty: the home's broker's, kafka/credentials.json); with neither, no authentication.
    kafka_user: str = ""
    kafka_password: str = dataclasses.field(default="", repr=False)
    kafka_credentials: str = ""
    # The certificate authority whose broker certificates a client with credentials trusts (TLS;
    # empty: the one beside the credentials file, the broker's own, tls/ca.crt).
    kafka_ca: str = ""
    # The master port of the standalone cluster `lakehouse cluster start` runs (0: any free one).
    cluster_port: int = 7077
    # The S3 API of s3a:// locations, its keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; unset: those
    # of this home's `lakehouse s3 start` server), and that server's port.
    s3_endpoint: str = ""
    s3_access_key: str = dataclasses.field(default="", repr=False)
    s3_secret_key: str = dataclasses.field(default="", repr=False)
    s3_port: int = 9000
    # --- Metrics (docs/operations.md, "Metrics and alerts") ---
    # The port of a stream's metrics endpoint on loopback: 0 any free one, a number that one, off none.
    metrics_port: str = "0"
    # The Prometheus `lakehouse prometheus start` runs on loopback (0: any free port), how often it
    # scrapes and evaluates its rules, and the `for:` of every alert rule instead of the rule's own
    # (empty: the rule's own; tests shorten it).
    prometheus_port: int = 9090
    prometheus_scrape_interval: str = "15s"
    alert_for: str = ""
    # Streams' endpoints and Airflow's StatsD exporters on other hosts, as HOST:PORT separated by
    # commas, which that Prometheus scrapes besides those the home's metrics/ folder names (each writes
    # its address there only on its own host); `lakehouse hosts run` sets both from docker/deployment.yaml.
    prometheus_stream_targets: str = ""
    prometheus_airflow_targets: str = ""
    # The Alertmanager `lakehouse alertmanager start` runs (0: any free port), which that Prometheus
    # sends what fires to; the webhook it POSTs each notification to, firing and resolved (empty: none,
    # the alerts wait in its API; the URL of a chat's webhook is a secret); how long it gathers a new
    # group's alerts before notifying, and how long it waits between notifications of a group's
    # changes (a resolution among them). Or a configuration of one's own instead of the generated
    # one: email, Slack, PagerDuty (docs/operations.md, "Metrics and alerts").
    alertmanager_port: int = 9093
    alert_webhook_url: str = dataclasses.field(default="", repr=False)
    alert_group_wait: str = "30s"
    alert_group_interval: str = "5m"
    alertmanager_config: str = ""

    def metrics_port_number(self) -> int | None:
        """The metrics endpoint's port (0: any free one; None: no endpoint)."""
        return None if self.metrics_port.strip().lower() == "off" else int(self.metrics_port)

    # Spark's commits to s3a:// tables (docs/operations.md, "Object storage"): conditional PUTs, as
    # delta-rs's; or claimed in the DynamoDB table s3_commit_table (created at first use) at
    # s3_commit_endpoint (empty: AWS's, in the S3 region); or single-driver, an opt-in for a
    # deployment where one writer writes each table. dynamodb_port: the DynamoDB-compatible server
    # `lakehouse s3 start` runs beside S3's.
    s3_commits: str = S3Commits.CONDITIONAL
    s3_commit_table: str = ""
    s3_commit_endpoint: str = ""
    dynamodb_port: int = 8000
    # --- Hosts (docs/operations.md, "Deployment across hosts") ---
    # The address every service `lakehouse` starts listens on and its status names: loopback on one
    # machine, a host's own address in a deployment across hosts (`lakehouse hosts run` sets it).
    bind_address: str = LOOPBACK
    # The description of that deployment: its hosts, their addresses and services, the ports.
    deployment: str = str(PROJECT_ROOT / "docker" / "deployment.yaml")

    def kafka_topic(self, pipeline_topic: str) -> str:
        return f"{self.kafka_topic_prefix}{pipeline_topic}"

    def kafka_credentials_file(self) -> Path:
        """The Kafka principals' passwords: the setting's file, or this home's broker's."""
        return Path(self.kafka_credentials) if self.kafka_credentials else self.kafka_dir() / KAFKA_CREDENTIALS

    def kafka_ca_file(self) -> Path:
        """The authority a Kafka client checks the broker's certificate against."""
        return (
            Path(self.kafka_ca)
            if self.kafka_ca
            else self.kafka_credentials_file().parent / TLS_FOLDER / AUTHORITY_CERTIFICATE
        )


# Each group its own record, so that one reads as what it tunes; Settings has every field of each
# under its own name (a dataclass's fields run from its last base to its first: the paths, which
# have no default, come first).
@dataclasses.dataclass(frozen=True)
class Settings(Services, Orchestration, StreamTuning, SparkTuning, Paths):
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Each field from ``LAKEHOUSE_<FIELD>`` when set; the locations from ``LAKEHOUSE_HOME``."""
        env = os.environ if env is None else env
        home = to_uri(env.get("LAKEHOUSE_HOME") or _default_home())

        def text(name: str) -> str:
            return env.get(f"LAKEHOUSE_{name.upper()}", getattr(cls, name))

        def integer(name: str) -> int:
            value = text(name)
            try:
                return int(value)
            except ValueError:
                raise LakehouseError(f"LAKEHOUSE_{name.upper()} must be a whole number, not {value!r}") from None

        def names(variable: str) -> tuple[str, ...]:
            return tuple(p.strip() for p in env.get(variable, "").split(",") if p.strip())

        settings = cls(
            home=home,
            log_uri=to_uri(env.get("LAKEHOUSE_LOG_URI") or f"{home}/log"),
            warehouse_uri=to_uri(env.get("LAKEHOUSE_WAREHOUSE_URI") or f"{home}/warehouse"),
            checkpoint_uri=to_uri(env.get("LAKEHOUSE_CHECKPOINT_URI") or f"{home}/checkpoints"),
            watermark_delay=env.get("LAKEHOUSE_WATERMARK_DELAY") or None,
            allowed_lateness=env.get("LAKEHOUSE_ALLOWED_LATENESS") or None,
            extra_packages=names("LAKEHOUSE_SPARK_PACKAGES"),
            pipelines=names("LAKEHOUSE_PIPELINES"),
            s3_access_key=env.get("AWS_ACCESS_KEY_ID", ""),
            s3_secret_key=env.get("AWS_SECRET_ACCESS_KEY", ""),
            **{name: text(name) for name in _TEXT_FIELDS},
            **{name: text(name).strip() for name in _STRIPPED_FIELDS},
            **{name: integer(name) for name in _INTEGER_FIELDS},
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        _validate(self)

    def replace(self, **changes) -> Settings:
        updated = dataclasses.replace(self, **changes)
        updated.validate()
        return updated


def environment_variables() -> tuple[str, ...]:
    """Every ``LAKEHOUSE_*`` variable the settings read."""
    fields = (*_TEXT_FIELDS, *_STRIPPED_FIELDS, *_INTEGER_FIELDS)
    return (*_NAMED_VARIABLES, *(f"LAKEHOUSE_{name.upper()}" for name in fields))


def _validate(settings: Settings) -> None:
    """Every setting readable and in range, or a LakehouseError naming its variable."""
    for name in (*_DURATION_FIELDS, "watermark_delay", "allowed_lateness"):
        value = getattr(settings, name)
        if value is not None:
            parse_duration(value)
    if settings.shuffle_partitions < 1:
        raise LakehouseError("LAKEHOUSE_SHUFFLE_PARTITIONS must be at least 1")
    if settings.max_files_per_trigger < 0:
        raise LakehouseError("LAKEHOUSE_MAX_FILES_PER_TRIGGER must be 0 (no limit) or more")
    try:
        parse_size(settings.max_bytes_per_trigger)
    except LakehouseError as error:
        raise LakehouseError(f"LAKEHOUSE_MAX_BYTES_PER_TRIGGER: {error}") from None
    if parse_duration(settings.trigger_interval).total_seconds() < 1:
        raise LakehouseError("LAKEHOUSE_TRIGGER_INTERVAL must be at least 1s")
    for name in _PORT_FIELDS:
        if not 0 <= getattr(settings, name) <= 65535:
            raise LakehouseError(f"LAKEHOUSE_{name.upper()} must be a port number (1-65535, or 0: any free one)")
    if settings.sql_route not in choices(SqlRoute) and not settings.sql_route.startswith("sc://"):
        raise LakehouseError(
            f"LAKEHOUSE_SQL_ROUTE must be auto, embedded or an sc://host:port URL, not {settings.sql_route!r}"
        )
    if settings.spark_remote and not settings.spark_remote.startswith("sc://"):
        raise LakehouseError(f"LAKEHOUSE_SPARK_REMOTE must be an sc://host:port URL, not {settings.spark_remote!r}")
    if settings.metastore_url and not settings.metastore_url.startswith("jdbc:postgresql://"):
        raise LakehouseError(
            f"LAKEHOUSE_METASTORE_URL must be a jdbc:postgresql:// URL, not {settings.metastore_url!r}"
        )
    if settings.s3_commits not in choices(S3Commits):
        raise LakehouseError(
            f"LAKEHOUSE_S3_COMMITS must be one of {', '.join(choices(S3Commits))}, not {settings.s3_commits!r}"
        )
    if settings.stream_lag_batches < 2:
        raise LakehouseError("LAKEHOUSE_STREAM_LAG_BATCHES must be at least 2 (growth needs two batches)")
    if settings.kafka_bootstrap and not re.match(r"^[\w.-]+:\d+(,[\w.-]+:\d+)*$", settings.kafka_bootstrap):
        raise LakehouseError(
            f"LAKEHOUSE_KAFKA_BOOTSTRAP must be host:port[,host:port...], not {settings.kafka_bootstrap!r}"
        )
    if not re.match(r"^[\w.-]*$", settings.kafka_topic_prefix):
        raise LakehouseError("LAKEHOUSE_KAFKA_TOPIC_PREFIX may hold letters, digits, '.', '_' and '-' only")
    _validate_metrics(settings)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9.-]*$", settings.bind_address):
        raise LakehouseError(
            f"LAKEHOUSE_BIND_ADDRESS must be an IPv4 address or a host name, not {settings.bind_address!r}"
        )
    if settings.max_offsets_per_trigger < 0:
        raise LakehouseError("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER must be 0 (no limit) or more")


def _validate_metrics(settings: Settings) -> None:
    port = settings.metrics_port.strip().lower()
    if port != "off" and not (port.isdigit() and int(port) <= 65535):
        raise LakehouseError(f"LAKEHOUSE_METRICS_PORT must be a port number, 0 (any free one) or off, not {port!r}")
    if settings.alert_for:
        parse_duration(settings.alert_for)
    if settings.alert_webhook_url and not re.match(r"^https?://[^/\s]+", settings.alert_webhook_url):
        raise LakehouseError("LAKEHOUSE_ALERT_WEBHOOK_URL must be an http:// or https:// URL")
    if parse_duration(settings.alert_group_interval).total_seconds() < 1:
        raise LakehouseError("LAKEHOUSE_ALERT_GROUP_INTERVAL must be at least 1s")
