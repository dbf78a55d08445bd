"""The platform's words, defined once. Each value is the string stored in the tables and accepted on
the command line and in Airflow's forms; the CLI's choices and the DAG Params' enums are built from
these classes. Standard library only: DAG files import it at parse time."""

from __future__ import annotations

from enum import StrEnum


def choices(vocabulary: type[StrEnum]) -> list[str]:
    """The values of a vocabulary, in declaration order (for argparse choices and JSON-schema enums)."""
    return [member.value for member in vocabulary]


class Fate(StrEnum):
    """What became of a record the speed layer read: every record gets exactly one."""

    QUARANTINED = "quarantined"
    DUPLICATE = "duplicate"
    LATE = "late"
    ON_TIME = "on_time"


class BatchStage(StrEnum):
    """A stage of a speed-layer micro-batch, timed on the driver (``ops.stream_progress.stage_ms``).
    Each write's stage includes its Delta commit."""

    READ = "read"  # planning the read: the files' sizes, the watermark before, files still being written
    PARSE = "parse"  # the job that reads and parses the lines, observes their summary, collects digests
    DEDUPE = "dedupe"  # the lookup of the batch's ids among those bronze accepted
    BRONZE = "bronze"  # the bronze append, which also computes the fates and counts them
    QUARANTINE = "quarantine"  # the quarantine append
    PANES = "panes"  # the pane state before the batch, the panes it emits, brought to the driver
    PANE_LOG = "pane_log"  # the pane log's append
    MERGE = "merge"  # the MERGE of the panes into gold __speed


class PaneTiming(StrEnum):
    """When a pane fired relative to the on-time watermark (Streaming 102)."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


class AccumulationMode(StrEnum):
    """How successive panes of a window relate (Streaming 102), one view each over the pane log."""

    ACCUMULATING = "accumulating"
    DISCARDING = "discarding"
    RETRACTING = "retracting"


class Layer(StrEnum):
    """Which layer computed a served value (the serving view's ``source`` column)."""

    SPEED = "speed"
    BATCH = "batch"


class Source(StrEnum):
    """What a backfill reads: bronze (every accepted event) or the raw retained log, parsed again."""

    BRONZE = "bronze"
    LOG = "log"


class Reprocess(StrEnum):
    """A backfill chunk whose inputs did not change: skipped, or recomputed anyway."""

    SKIP = "skip"
    REDO = "redo"


# What a backfill does with an option its request leaves out: the command line, the trigger form,
# plan-backfill and the batch layer's own API all take these. Redo: a backfill recomputes what it is
# asked to unless told it may skip, so its result never rests on a fingerprint by default.
DEFAULT_SOURCE = Source.BRONZE
DEFAULT_CHUNK = "1d"
DEFAULT_REPROCESS = Reprocess.REDO


class CorrectionChange(StrEnum):
    """A row of ``audit.corrections``: the value served before (retracted) or the recomputed one."""

    RETRACT = "retract"
    INSERT = "insert"


class FeedChange(StrEnum):
    """Delta's change data feed: the ``_change_type`` of each row it returns."""

    INSERT = "insert"
    UPDATE_PREIMAGE = "update_preimage"
    UPDATE_POSTIMAGE = "update_postimage"
    DELETE = "delete"


class RunStatus(StrEnum):
    """The life of a batch run (backfill or correction) in its ops table."""

    PLANNED = "planned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AuditTarget(StrEnum):
    """What an audit compares with the truth: the speed table, or the serving view SQL users read."""

    SPEED = "speed"
    SERVING = "serving"


class AuditUnit(StrEnum):
    """What one verdict of an audit is about: a closed (window, key) of fixed windows, or a group of
    overlapping sessions of one key (lakehouse.audit.sessions)."""

    WINDOW_ROWS = "(window, key) rows"
    SESSION_GROUPS = "session groups"


class AuditMode(StrEnum):
    """How much an audit compares: every closed window of its range, or only those changed since
    the last audit's pins."""

    FULL = "full"
    INCREMENTAL = "incremental"


class Verdict(StrEnum):
    """An audited (window, key): equal to the truth, different for named reasons, or not explained."""

    MATCHED = "matched"
    EXPLAINED = "explained"
    UNEXPLAINED = "unexplained"


class Cause(StrEnum):
    """Why one event of the truth is, or is not, in the audited value."""

    ON_TIME = "on_time"
    LATE = "late"
    NOT_YET_READ = "not_yet_read"
    MISSING = "missing"
    # A late difference whose window a correction run has already recomputed: the served value is right.
    CORRECTED = "corrected"
    # A batch-served value computed before these events reached bronze or the log.
    ARRIVED_AFTER_BATCH = "arrived_after_batch"
    # A value an operator changed through ``lakehouse repair``, recorded in audit.manual_changes.
    MANUAL_CHANGE = "manual_change"


class JoinCause(StrEnum):
    """Which side's late data explains a difference of a windowed join's row."""

    LATE_EVENT = "late_event"  # the counts differ: events beyond their side's watermark, or unread
    LATE_READING = "late_reading"  # the reading used differs: its mean, band or zone


EXPLAINING_CAUSES = (Cause.LATE, Cause.NOT_YET_READ, Cause.CORRECTED, Cause.ARRIVED_AFTER_BATCH, Cause.MANUAL_CHANGE)


class OutputFormat(StrEnum):
    """How ``lakehouse sql`` prints rows."""

    TABLE = "table"
    CSV = "csv"
    JSON = "json"


class SqlRoute(StrEnum):
    """Where ``lakehouse sql`` runs a statement (an ``sc://host:port`` URL names a service directly)."""

    AUTO = "auto"  # through this home's Spark service when it is up, embedded otherwise
    EMBEDDED = "embedded"  # a Spark of its own in the command's process


class Role(StrEnum):
    """What a user of the Spark service is (``lakehouse users add --role``); both read only.
    Operators are the people who run the platform and read its query log."""

    ANALYST = "analyst"
    OPERATOR = "operator"


class SqlEndpoint(StrEnum):
    """Which endpoint of the Spark service a statement came through (``lakehouse.query_log``)."""

    JDBC = "jdbc"  # the Thrift server: JDBC and ODBC clients
    CONNECT = "connect"  # Spark Connect: lakehouse sql, notebooks, the platform's jobs


class QueryOutcome(StrEnum):
    """How a statement (or a login) at the Spark service ended (``lakehouse.query_log``)."""

    OK = "ok"
    REFUSED = "refused"  # a failed login, or a statement the read-only rule refused
    FAILED = "failed"  # any other error


# The name the platform's own jobs log in to the Spark service under, with its write token; no
# person may take it (lakehouse users add).
JOBS_USER = "lakehouse-jobs"


class S3Commits(StrEnum):
    """How Spark commits to s3a:// tables (docs/operations.md, "Object storage")."""

    CONDITIONAL = "conditional"  # each commit one PUT with If-None-Match: safe beside Spark and delta-rs
    DYNAMODB = "dynamodb"  # each commit claimed in a DynamoDB table first: safe for several Spark drivers
    SINGLE_DRIVER = "single-driver"  # Delta's S3SingleDriverLogStore: one driver per table, or commits are lost


class ClusterRole(StrEnum):
    """What ``lakehouse cluster start --role`` runs on the host it runs on."""

    ALL = "all"  # a master and two workers, the one-machine cluster
    MASTER = "master"  # the master alone, on LAKEHOUSE_BIND_ADDRESS:LAKEHOUSE_CLUSTER_PORT
    WORKER = "worker"  # one worker, registered with the master LAKEHOUSE_SPARK_MASTER names


class LogSink(StrEnum):
    """Where the retained log lives: JSONL files under the log URI, or a Kafka topic per pipeline."""

    FILES = "files"
    KAFKA = "kafka"


class FieldKind(StrEnum):
    """The JSON value kinds an event field may hold, checked against the type its JSON text carries.
    MONEY and DECIMAL are JSON numbers read exactly (never through a float)."""

    STRING = "string"
    INTEGER = "integer"
    MONEY = "money"
    DECIMAL = "decimal"
    TIMESTAMP = "timestamp"


class MetricKind(StrEnum):
    """What a metric computes over a window's events; each kind says how partial values combine
    (docs/design.md, "Metrics and how they merge")."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    APPROX_DISTINCT = "approx_distinct"  # a HyperLogLog sketch; its estimate is served
    MEAN = "mean"  # derived at query time from a sum and a count, never stored
    CUSTOM = "custom"  # a function of the project's pipelines/metrics.py, merged as its decorator says


class WindowKind(StrEnum):
    TUMBLING = "tumbling"
    HOPPING = "hopping"
    SESSION = "session"


class Staleness(StrEnum):
    """Why a range of the batch layer's windows no longer stands for its events (lakehouse stale)."""

    OLDER_DEFINITION = "older_definition"  # recomputed by a definition of the pipeline since changed
    NEVER_RECOMPUTED = "never_recomputed"  # bronze has its events, the batch layer never recomputed it
    LATER_DATA = "later_data"  # events reached bronze after its recomputation, and no correction folded them


class DeployedService(StrEnum):
    """What a host of the deployment across hosts runs (docker/deployment.yaml gives each its ports)."""

    S3 = "s3"
    KAFKA = "kafka"
    POSTGRESQL = "postgresql"  # the Hive metastore's and Airflow's databases
    SPARK_MASTER = "spark-master"
    SPARK_WORKER = "spark-worker"
    SPARK_SERVICE = "spark-service"  # Spark Connect and Thrift (JDBC/ODBC), one driver
    AIRFLOW_API_SERVER = "airflow-api-server"
    AIRFLOW_SCHEDULER = "airflow-scheduler"
    AIRFLOW_DAG_PROCESSOR = "airflow-dag-processor"
    AIRFLOW_TRIGGERER = "airflow-triggerer"
    AIRFLOW_METRICS = "airflow-metrics"  # the StatsD exporter: Airflow's metrics, for Prometheus
    SPEED_LAYER = "speed-layer"  # the stream's driver
    PROMETHEUS = "prometheus"
    ALERTMANAGER = "alertmanager"
