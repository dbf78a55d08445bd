"""The one Spark session factory: jobs, tests and the CLI all get their session here.

Delta's JARs come from Maven Central through Spark's package resolver, into an Ivy folder inside
the project's ignored ``.cache/``. Once resolved, the JAR list is written to a manifest and later
sessions load the JARs straight from disk: no network, and no Ivy resolution at start-up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.errors import LakehouseError
from lakehouse.settings import LOOPBACK, PROJECT_ROOT, Settings
from lakehouse.storage.java import check_java, compiled_jar, maven_central_jar
from lakehouse.vocabulary import JOBS_USER

if TYPE_CHECKING:
    import pyarrow as pa

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
# The JIT's quick compiler only, and the serial garbage collector: half the CPU for a job of a minute
# or two on small data, slower for a long-running stream (docs/operations.md, "Short jobs").
QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_packages() -> list[str]:
    """Maven coordinates of the Delta JARs that match the installed delta-spark and pyspark."""
    import importlib.metadata

    spark_minor = ".".join(importlib.metadata.version("pyspark").split(".")[:2])
    delta_version = importlib.metadata.version("delta-spark")
    return [f"io.delta:delta-spark_{spark_minor}_2.13:{delta_version}"]


# The platform's own JVM classes (the read-only rule of lakehouse.serving, the local file system of
# FORK_FREE_FILE_CONTEXT, the SLF4J binding the AWS SDK's bundle looks for), compiled from their Java
# source by ``make setup`` (or by the first session that needs them) into the ignored .cache/.
EXTENSIONS_SOURCES = (PROJECT_ROOT / "lakehouse" / "serving" / "java", PROJECT_ROOT / "lakehouse" / "storage" / "java")
EXTENSIONS_JAR = PROJECT_ROOT / ".cache" / "jvm" / "lakehouse-extensions.jar"
SESSION_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension,lakehouse.serving.ReadOnlyExtension"
# Hadoop's local file system starts a chmod or readlink process for each file it creates or renames
# when its native library is missing, as it is from pyspark (lakehouse/storage/java, docs/design.md
# "Performance"). A local session uses the platform's for Hadoop's FileContext, through which
# Delta commits and Spark writes its checkpoints. Set once the session runs: spark-submit opens local
# files before the platform's JAR is loaded. Hadoop's FileSystem (data files) stays Hadoop's: it is
# cached from before that moment. A session on a cluster keeps Hadoop's throughout: its executors
# would need the class too, which is not tried.
FORK_FREE_FILE_CONTEXT = ("fs.AbstractFileSystem.file.impl", "lakehouse.storage.ForkFreeLocalFileSystem$Context")


def extensions_jar() -> str:
    """The platform's JAR, compiled again whenever a source file is newer than it."""
    from pyspark.find_spark_home import _find_spark_home

    sources = sorted(source for folder in EXTENSIONS_SOURCES for source in folder.rglob("*.java"))
    delta = [maven_central_jar(coordinates) for coordinates in spark_packages()]  # for SnapshotWarmer
    return compiled_jar(sources, [str(Path(_find_spark_home()) / "jars" / "*"), *delta], EXTENSIONS_JAR)


# Spark's Kafka source, JAR by JAR rather than through the package resolver. 4.1.1's source fails
# a stream that restarts on a batch planned before a crash (NullPointerException in
# KafkaMicroBatchStream.metrics, SPARK-57438); 4.1.3 fixes it, but its POM names a token provider
# 4.1.3 that Maven Central does not serve. Its dependencies' other JARs ship with pyspark.
KAFKA_SOURCE_JARS = (
    "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3",
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.1.1",
    "org.apache.kafka:kafka-clients:3.9.1",
    "org.apache.commons:commons-pool2:2.12.1",
)


def platform_jars(settings: Settings) -> list[str]:
    """The JARs a session loads besides Delta's: the platform's own, Spark's Kafka source, and
    Hadoop's s3a file system and the S3 log store of commits when the settings name an S3 endpoint
    (object_store.S3A_JARS, commits.session_jars)."""
    from lakehouse.storage import commits, object_store

    s3 = [f"local:{maven_central_jar(c)}" for c in object_store.S3A_JARS] if settings.s3_endpoint else []
    kafka = [maven_central_jar(coordinates) for coordinates in KAFKA_SOURCE_JARS]
    return [extensions_jar(), *kafka, *s3, *commits.session_jars(settings)]


def is_remote(spark) -> bool:
    """True for a Spark Connect session: its JVM is the service's, out of this process's reach."""
    return not hasattr(spark, "_jsparkSession")


def to_arrow(frame) -> pa.Table:
    """``frame.toArrow()`` in one request to a Spark Connect server, not two. pyspark's Connect
    ``toArrow`` first asks the server to analyze the plan for its schema, then executes it, though the
    execution's answer carries the same schema: the analysis cost a backfill chunk through the
    service 40 ms of its 0.54 s (16 chunks, cProfile). A local session's frame is its own toArrow."""
    if not is_remote(frame.sparkSession):
        return frame.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    table, schema = frame._to_table()  # what Connect's toArrow executes, without its analysis first
    schema = schema if schema is not None else frame.schema
    return table.cast(to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True))


def release_connect_session() -> None:
    """End this process's Spark Connect session on the service, if it made one. An unreleased session
    stays open there until the service's idle timeout (Spark's default: an hour), so a backfill of a
    month in hourly chunks, a session a chunk, would leave 720 open. The release is one request, and
    spares pyspark's own at exit (an ML cache clean-up on the session). A failed release leaves the
    session to that timeout: the command's outcome stands either way."""
    connect = sys.modules.get("pyspark.sql.connect.session")  # a command that made none never imported it
    session = connect.SparkSession.getActiveSession() if connect else None
    if session is not None:
        with contextlib.suppress(Exception):
            session.stop()


def launched_by_spark_submit() -> bool:
    """True inside ``spark-submit jobs/...``: the JVM exists and handed Python its gateway."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_submit_jars(settings: Settings) -> str:
    """The ``--jars`` value for ``spark-submit jobs/...``: the cached Delta JARs (resolving them once)."""
    jar_cache = JarCache(settings.ivy_dir, spark_packages() + list(settings.extra_packages))
    jars = jar_cache.cached_jars()
    if jars is None:
        build_spark_session(settings, "resolve-jars").stop()
        jars = jar_cache.cached_jars()
    if not jars:
        raise LakehouseError(f"no cached JARs for {', '.join(jar_cache.packages)} in {jar_cache.ivy_dir}")
    return ",".join([*jars, *platform_jars(settings)])


class JarCache:
    """Where the resolved JARs for one set of coordinates live, and the manifest listing them."""

    def __init__(self, ivy_root: str, packages: list[str]):
        key = hashlib.sha256(",".join(sorted(packages)).encode()).hexdigest()[:12]
        self.packages = packages
        self.ivy_dir = Path(ivy_root) / key
        self.manifest = self.ivy_dir / "manifest.json"

    def cached_jars(self) -> list[str] | None:
        if not self.manifest.exists():
            return None
        jars = json.loads(self.manifest.read_text())["jars"]
        return jars if jars and all(Path(jar).exists() for jar in jars) else None

    def remember_resolved_jars(self) -> None:
        jars = sorted(str(path) for path in (self.ivy_dir / "jars").glob("*.jar"))
        if jars:
            self.manifest.write_text(json.dumps({"packages": self.packages, "jars": jars}, indent=1))


# Room for the recursion of Spark's variant functions, which walk a JSON value one call per level:
# a log line nested 999 deep (the parser takes up to 1,000) overflowed the default 1 MB stack of a
# task thread, and a StackOverflowError kills the JVM, stream and all. The stack is reserved, and
# only the pages a thread touches are used. The alternative, telling containers apart by their top
# level before any recursive call, made the parse 36% slower (100,000 lines: 1.66 s -> 2.27 s).
TASK_STACK = "-Xss16m"
# Let the JIT compile the parse's generated code. The log parse is one whole-stage method of tens of
# kilobytes of bytecode (a few dozen checks per line), and HotSpot leaves any method over 8,000
# bytes to its bytecode interpreter: a profile of a 1M-line log backfill put 41% of its samples in
# that one method. Side by side at 1M lines, the parse 34.5 s -> 20 s (from_json alone: 17 s); make
# bench's backfill from the log 49.5 s -> 34.0 s, 1.94x -> 1.50x the bare Spark job.
#
# Compiled, such methods need room: with the quick compiler only (QUICK_START_JAVA_OPTIONS) the JVM
# reserves 48 MB of code cache instead of 240, and the demo's generated code filled it
# ("VirtualMachineError: Out of space in CodeCache for adapters" failed make setup's demo in CI, and
# one run in two here; it peaked at 58 MB after the fix, in 3 runs). So the size is the full JIT's
# default in either mode; the JVM commits only what it uses.
JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods -XX:ReservedCodeCacheSize=240m"
# What every JVM that runs tasks needs, the driver (local tasks run in it) and any executor.
TASK_JVM_OPTIONS = f"-Duser.timezone=UTC {TASK_STACK} {JIT_HUGE_METHODS}"


def driver_java_options(settings: Settings) -> str:
    """The driver JVM's options: UTC, the project's quiet log configuration, room for deep JSON
    (TASK_STACK), compiled parse code (JIT_HUGE_METHODS) and the class archive, then the settings'
    own. The driver starts before any Python runs in it, so these go on its command line. Local tasks
    run in the driver; executors elsewhere get the same (``spark.executor.extraJavaOptions``)."""
    own = f"{TASK_JVM_OPTIONS} -Dlog4j.configurationFile={LOG4J_CONFIG}"
    return " ".join(part for part in (own, class_archive_options(settings), settings.driver_java_options) if part)


def executor_java_options(settings: Settings) -> str:
    """An executor's options (on a cluster; local tasks run in the driver): UTC, room for deep JSON,
    compiled parse code, and the driver's class archive and options. An executor starts with the
    driver's class path (Spark's JARs), so it maps the same archive."""
    own = TASK_JVM_OPTIONS
    return " ".join(part for part in (own, class_archive_options(settings), settings.driver_java_options) if part)


# Set in the JVM that writes the archive (lakehouse.class_archive); such a JVM reads none.
ARCHIVE_AT_EXIT = "-XX:ArchiveClassesAtExit="


def class_archive_options(settings: Settings) -> str:
    """Map the classes of ``settings.class_archive`` when it exists. A JVM checks that the archive
    matches its own build and class path, and ignores it otherwise; its log lines about that are off,
    since the job runs the same either way, only slower to start."""
    archive = settings.class_archive
    if not archive or not Path(archive).is_file() or ARCHIVE_AT_EXIT in settings.driver_java_options:
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def session_sql_confs(settings: Settings) -> dict[str, str]:
    """The settings a session may change for itself at any time: set on a local session's builder,
    and on a Spark Connect session once it exists (the service's own defaults are for SQL)."""
    return {
        "spark.sql.session.timeZone": "UTC",
        # Jobs name tables by location (delta.`uri`); the Spark service turns this off for analysts.
        "spark.sql.runSQLOnFiles": "true",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        # Delta's VACUUM lists a table with one task per partition of this setting (Spark's default:
        # 10000): DeltaFileOperations.recursiveListDirs repartitions its listing to it, however small
        # the table. Measured side by side in one local[1] session on the DAG test's 9 tables:
        # maintain() took 346 s, 322 s of it in VACUUM (31-40 s a table, 90,304 tasks in all); with
        # the shuffle partitions here (2), 40 s, VACUUM 23 s (323 tasks), same files compacted and kept.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(settings.shuffle_partitions),
        # Delta's own post-commit work that a small local lakehouse does not need on every write.
        "spark.databricks.delta.stats.collect": "true",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # A job reads what is committed, and skips files by their statistics, in its own JVM or as a
        # client of the Spark service, whose SQL defaults differ (lakehouse.serving.server). Delta's
        # deletion-vector DML fails without statistics skipping ("non-pinned table snapshot").
        "spark.databricks.delta.stalenessLimit": "0",
        "spark.databricks.delta.stats.skipping": "true",
    }


# The most tables whose Delta log a session keeps in memory (see _configured_builder).
DELTA_LOGS_KEPT = 100


def _configured_builder(builder, settings: Settings, app_name: str):
    """The session's configuration, whoever starts the JVM (this process or spark-submit)."""
    builder = (
        builder.appName(app_name)
        .config("spark.sql.extensions", SESSION_EXTENSIONS)
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.catalogImplementation", "in-memory")
        # The catalog's default database lives here, and Spark creates its folder when a table is first
        # registered: by default spark-warehouse/ in whatever directory the command ran from.
        .config("spark.sql.warehouse.dir", settings.warehouse_uri)
        .config("spark.driver.extraJavaOptions", driver_java_options(settings))
        .config("spark.executor.extraJavaOptions", executor_java_options(settings))
        .config("spark.default.parallelism", str(settings.shuffle_partitions))
        # Spark keeps the classes it compiles for queries (Janino) in a cache of 100 by default; a
        # micro-batch of the speed layer generates about 160 (most of them Delta's log replays), so
        # each batch compiled them all again: 790 compilations per 5 batches, 40 with this cache.
        # Measured side by side: median micro-batch 5.9 s -> 5.45 s.
        .config("spark.sql.codegen.cache.maxEntries", "1000")
        .config("spark.driver.memory", settings.driver_memory)
        # Delta keeps the log of every table a JVM has opened, with its snapshot's plans, for an
        # hour after its last use and up to 10,000 tables: about 2.4 MB of heap a table. A session
        # that opened hundreds (a test run) filled a 2 GB heap until a broadcast join failed for
        # memory (docs/operations.md, "Long-lived sessions"). A lakehouse has a few dozen tables.
        .config("spark.databricks.delta.delta.log.cacheSize", str(DELTA_LOGS_KEPT))
        # PySpark records the Python call site of every column function and DataFrame method in the
        # JVM, for error messages: four or five py4j round trips each, about a quarter of the 2,100
        # a micro-batch made (docs/design.md, "Performance"). Spark's errors still name the
        # failing expression; they no longer name the Python line that built it.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # Executors on a cluster run the Python of this process (its venv, with the platform installed).
        .config("spark.pyspark.python", sys.executable)
    )
    if settings.bind_address != LOOPBACK:
        # Across hosts the executors on the workers' hosts call the driver back at its host's address.
        builder = builder.config("spark.driver.host", settings.bind_address)
    for key, value in session_sql_confs(settings).items():
        builder = builder.config(key, value)
    from lakehouse.storage import commits, conditional_writes, object_store

    if settings.s3_endpoint:
        # Refused before anything is created when its commits to s3a:// could be lost (commits.check).
        s3_confs = {**commits.spark_confs(settings, object_store.REGION), **object_store.spark_confs(settings)}
        object_store.ensure_buckets(settings)
        conditional_writes.check_store(settings)
        for key, value in s3_confs.items():
            builder = builder.config(key, value)
    return builder


WRITE_TOKEN_CONF = "spark.lakehouse.writeToken"


# The Connect client sends a token over a channel without TLS to "localhost" only (its local channel
# credentials): a loopback address is spelled so.
_LOOPBACK_HOSTS = re.compile(r"^sc://(127\.0\.0\.1|\[::1\]|localhost)(?=[:/]|$)")


def connect_builder(url: str, user: str, token: str):
    """A Spark Connect session builder for the service at ``url``, logged in as ``user`` with ``token``:
    the service's interceptor checks the token, sent as a bearer token with every request, against
    the user the requests name. Both go in the channel's settings, not the URL, which a client may show.

    On loopback the token goes as the client's call credentials; to another host, where the client
    would insist on TLS the service does not have, as the same ``authorization`` header on a plain
    channel: in clear on that network, which Spark's Connect server cannot encrypt (docs/operations.md)."""
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # What pyspark's own builder sets for a remote session: its helpers (a DDL string's schema, say)
    # then ask the Connect session, not a local SparkContext there is none of.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    local = _LOOPBACK_HOSTS.match(url)
    channel = DefaultChannelBuilder(_LOOPBACK_HOSTS.sub("sc://localhost", url))
    channel.set(DefaultChannelBuilder.PARAM_USER_ID, user)
    if local:
        channel.set(DefaultChannelBuilder.PARAM_TOKEN, token)
    else:
        channel.set("authorization", f"Bearer {token}")
    return ConnectSession.builder.channelBuilder(channel)


def connect_session(settings: Settings):
    """A Spark Connect session of the service at ``settings.spark_remote``, set up as a job's: the
    session settings of a local one, and the write token that lets it write (the service's own file
    in this home when the settings give none)."""

    token = settings.spark_remote_token
    token_file = settings.service_dir() / "write-token"
    if not token and token_file.is_file():
        token = token_file.read_text().strip()
    if not token:
        raise LakehouseError(
            f"jobs through {settings.spark_remote} need its write token: set LAKEHOUSE_SPARK_REMOTE_TOKEN "
            f"(the service writes it to {token_file})"
        )
    spark = connect_builder(settings.spark_remote, JOBS_USER, token).getOrCreate()
    # The token first, in a request of its own: the service judges a request by what its session may
    # do when the request arrives, and until the token is set a session may set only a few settings.
    # That first request is also the job's login, whose password is the same token, so a job learns
    # at once whether the service takes it, before it writes anything (even the tables it creates
    # through delta-rs).
    spark.conf.set(WRITE_TOKEN_CONF, token)
    # The rest in one request, not one each: a backfill chunk through the service opens a session,
    # and 11 round trips cost it about 15 ms (pyspark's own builder sets its options so).
    spark.conf._set_all(session_sql_confs(settings), silent=False)
    return spark


def driver_address(settings: Settings) -> str | None:
    """The address the driver binds to and executors reach it at: a host's own across hosts (its
    LAKEHOUSE_BIND_ADDRESS), loopback for local Spark and a cluster on this machine, else Spark's
    choice (None)."""
    if settings.bind_address != LOOPBACK:
        return settings.bind_address
    if settings.spark_master.startswith(("local", f"spark://{LOOPBACK}:", "spark://localhost:")):
        return LOOPBACK
    return None


def driver_local_ip(settings: Settings, inherited: str | None) -> str | None:
    """The SPARK_LOCAL_IP a driver's JVM starts with, given the one its process inherited: a host's
    own address wins (the driver's UI and block manager bind to SPARK_LOCAL_IP, and on another
    address the host's peers cannot reach them); on one machine an inherited one wins over loopback."""
    local_ip = driver_address(settings)
    if local_ip and settings.bind_address != LOOPBACK:
        return local_ip
    return inherited or local_ip


def build_spark_session(settings: Settings, app_name: str = "lakehouse", confs: dict[str, str] | None = None):
    """A SparkSession with Delta, UTC time, small shuffles, and an in-memory catalog; ``confs`` adds
    to or overrides that configuration (the Spark service's endpoints and metastore, say).

    The catalog is in-memory on purpose: an embedded Derby metastore can serve one JVM only, and
    the streaming job, batch jobs and SQL shell run side by side. Each session registers the Delta
    tables by location instead (see ``lakehouse.storage.catalog``).
    """
    # PySpark turns timestamps into naive datetimes in the process's zone: make that zone UTC, the
    # session's zone, so a datetime means the same instant in Python and in Spark.
    os.environ["TZ"] = "UTC"
    time.tzset()
    if settings.spark_remote:
        return connect_session(settings)
    check_java()
    local_ip = driver_local_ip(settings, os.environ.get("SPARK_LOCAL_IP"))
    if local_ip:
        os.environ["SPARK_LOCAL_IP"] = local_ip
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    jar_cache = JarCache(settings.ivy_dir, spark_packages() + list(settings.extra_packages))
    builder = _configured_builder(SparkSession.builder, settings, app_name)
    if launched_by_spark_submit():
        # spark-submit started the JVM before Python: its --master and --jars/--packages rule.
        return _ready(builder.getOrCreate())
    builder = builder.master(settings.spark_master)
    cached = jar_cache.cached_jars()
    builder = builder.config("spark.jars", ",".join([*(cached or []), *platform_jars(settings)]))
    if not cached:
        jar_cache.ivy_dir.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.jars.packages", ",".join(jar_cache.packages)).config(
            "spark.jars.ivy", str(jar_cache.ivy_dir)
        )
    for key, value in (confs or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as error:
        if cached:
            raise LakehouseError(f"Spark's JVM did not start: {error}") from error
        raise LakehouseError(
            f"Spark's JVM did not start; most likely the JARs {', '.join(jar_cache.packages)} could not be "
            f"resolved from Maven Central into {jar_cache.ivy_dir} (no network and no cache?). "
            "Spark's resolver output is above."
        ) from error
    if not cached:
        jar_cache.remember_resolved_jars()
    return _ready(spark)


def _ready(spark):
    """A started local session, quiet, whose Python side resolves each JVM name once, and which
    writes local commits and checkpoints without starting processes (FORK_FREE_FILE_CONTEXT)."""
    from lakehouse.storage.jvm_names import resolve_jvm_names_once

    spark.sparkContext.setLogLevel("ERROR")
    resolve_jvm_names_once(spark)
    if spark.sparkContext.master.startswith("local"):
        spark.sparkContext._jsc.hadoopConfiguration().set(*FORK_FREE_FILE_CONTEXT)
    return spark


@contextlib.contextmanager
def session_confs(spark, confs: dict[str, str]):
    """Set ``confs`` for the statements inside, then restore what was there."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def main() -> None:
    """``python -m lakehouse.storage.spark``: resolve and cache the JARs now, so later runs need no network."""
    settings = Settings.from_env()
    spark = build_spark_session(settings, "resolve-jars")
    print(f"Spark {spark.version} with Delta ready; JARs cached under {settings.ivy_dir}")
    spark.stop()


if __name__ == "__main__":
    try:
        main()
    except LakehouseError as error:
        raise SystemExit(f"lakehouse: error: {error}") from None
