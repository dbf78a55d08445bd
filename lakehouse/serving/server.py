"""``python -m lakehouse.serving.server``: the Spark service's driver (``lakehouse serve`` starts it).

One long-running Spark with Delta serves two endpoints on one catalog: Spark Connect (gRPC) and
Spark's Thrift server (HiveServer2's protocol, for JDBC and ODBC clients). Each client logs in as a
user of the users file (lakehouse.serving.users), and each of its statements is logged
(lakehouse.serving.query_log). Each client session is a
new Spark session of this JVM, and every one of them is read-only (lakehouse.serving.read_only)
unless it presents the write token this driver writes to ``<home>/service/write-token`` at each
start: the platform's jobs do (LAKEHOUSE_SPARK_REMOTE), analysts do not. This driver's own session
writes the catalog only: it registers every table and view at start, then, every few seconds, the
tables the jobs have created since.

With a metastore (``LAKEHOUSE_METASTORE_URL``) the catalog is Hive's, in PostgreSQL, and outlives the
service; without one it is in memory and registered again at each start.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from xml.sax.saxutils import escape

from lakehouse.eventtime import parse_duration
from lakehouse.services.certificates import java_key_store
from lakehouse.services.spark_service import ServiceState, delta_class_path, metastore_driver_jar
from lakehouse.serving.batch_cache import BatchCache
from lakehouse.serving.query_log import query_log_dir, register_query_log
from lakehouse.serving.snapshots import SnapshotWarmer
from lakehouse.serving.users import users_file
from lakehouse.settings import Settings
from lakehouse.vocabulary import JOBS_USER

REGISTER_EVERY_SECONDS = 5.0


def hive_site(settings: Settings) -> str:
    """The metastore's connection, password included, as hive-site.xml: read from the class path,
    so that the password appears in no command line.

    The schema is created table by table as the metastore first needs it; ``autoCreateAll`` deadlocked
    on the first CREATE TABLE on PostgreSQL, and the constraints it would add are not needed."""
    properties = {
        "javax.jdo.option.ConnectionURL": settings.metastore_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": settings.metastore_user,
        "javax.jdo.option.ConnectionPassword": settings.metastore_password,
        "datanucleus.schema.autoCreateTables": "true",
        "datanucleus.schema.autoCreateColumns": "true",
        "datanucleus.schema.autoCreateConstraints": "false",
        "hive.metastore.schema.verification": "false",
    }
    rows = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


# Spark's own metrics in Prometheus's format, served by the UI's web server on the service's address
# (it starts with SPARK_LOCAL_IP=LAKEHOUSE_BIND_ADDRESS, loopback by default): the driver's and
# executors' JVM, block manager, DAG scheduler and Connect figures at /metrics/prometheus, the
# executors' at /metrics/executors/prometheus.
SPARK_METRICS_PATH = "/metrics/prometheus/"


def metrics_confs(settings: Settings) -> dict[str, str]:
    """The UI on a free port, with Spark's PrometheusServlet, unless LAKEHOUSE_METRICS_PORT is off
    (then no UI at all). The UI can kill nothing; it shows the analysts' statements to this machine only."""
    if settings.metrics_port_number() is None:
        return {"spark.ui.enabled": "false"}
    return {
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        "spark.ui.killEnabled": "false",
        "spark.ui.prometheus.enabled": "true",
        "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
        "spark.metrics.conf.*.sink.prometheusServlet.path": SPARK_METRICS_PATH.rstrip("/"),
        # Names such as metrics_lakehouse_service_driver_..., the same at every start (Spark's
        # default puts the application's id in each name).
        "spark.metrics.namespace": "lakehouse_service",
        # Its pages keep fewer finished jobs than Spark's default thousand: the service runs
        # thousands of small queries a day.
        "spark.ui.retainedJobs": "200",
        "spark.ui.retainedStages": "200",
        "spark.sql.ui.retainedExecutions": "200",
    }


def write_metrics_target(spark, settings: Settings) -> None:
    """Name the UI's address for Prometheus (file service discovery, as the streams do)."""
    from urllib.parse import urlparse

    from lakehouse.services.process import write_json

    url = spark.sparkContext.uiWebUrl
    if not url:
        return
    folder = settings.metrics_dir() / "spark"
    folder.mkdir(parents=True, exist_ok=True)
    write_json(
        folder / "service.json",
        [{"targets": [f"{settings.bind_address}:{urlparse(url).port}"], "labels": {"service": "spark"}}],
    )


def endpoint_confs(settings: Settings) -> dict[str, str]:
    """Spark Connect and the Thrift server on the service's address (LAKEHOUSE_BIND_ADDRESS) and ports."""
    return {
        "spark.connect.grpc.binding.address": settings.bind_address,
        "spark.connect.grpc.binding.port": str(settings.connect_port),
        "spark.hadoop.hive.server2.thrift.bind.host": settings.bind_address,
        "spark.hadoop.hive.server2.thrift.port": str(settings.thrift_port),
    }


def client_confs() -> dict[str, str]:
    """What a client may do: log in (the interceptors), then read only, with no file read but the
    lakehouse's Delta tables and the query log."""
    return {
        "spark.lakehouse.readOnly": "true",
        # Connect requests of read-only sessions are judged before they are planned (the gate's
        # Javadoc says why); a compressed plan could not be, so clients are told not to compress.
        # The last one named runs first: ConnectLogins checks each request's user and token before
        # the gate judges it, and logs what both let through or refused.
        "spark.connect.grpc.interceptor.classes": ",".join(
            ["lakehouse.serving.ReadOnlyConnectGate", "lakehouse.serving.ConnectLogins"]
        ),
        "spark.connect.session.planCompression.threshold": "-1",
        # SQL on files (json.`/path`) infers a file's schema, reading it, before the statement is
        # judged; a read-only session cannot turn it back on (SET is refused, and so is the conf
        # over Connect or in a JDBC URL). The platform's jobs do, with the write token (session_sql_confs).
        "spark.sql.runSQLOnFiles": "false",
        # A session keeps no file listing of a catalog's file-based tables across queries: the query
        # log's table (its only one; the lakehouse's are Delta's) shows each line as soon as it is written.
        "spark.sql.filesourceTableRelationCacheSize": "0",
    }


def service_confs(settings: Settings) -> dict[str, str]:
    """The Spark configuration that makes a session the service: both endpoints on its address, every
    client session read-only, and the catalog in the metastore when there is one."""
    class_path = [*delta_class_path(settings)]
    staleness = parse_duration(settings.sql_staleness) // timedelta(milliseconds=1)
    confs = {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        **endpoint_confs(settings),
        **client_confs(),
        # Interactive queries over the gold tables (thousands of rows a day), where each task and
        # each adaptive re-planning costs more than the rows do. Measured side by side on the
        # latency bench's 25 queries over a day (bench/sql_latency.py): p50 0.75 s with 4 shuffle
        # partitions and adaptive execution, 0.59 s with 2, 0.52 s with 2 and no adaptive
        # execution, 0.46 s with 1 and none. Delta's data skipping by file statistics runs a query
        # of its own over each table's file list before the scan; the gold tables are partitioned by
        # day and hold a few files per day, so partition pruning alone leaves little to skip. On a warm
        # service, alternating sessions: p50 0.49 s with it, 0.29 s without. A Connect session may set
        # its own for a large, selective scan (bronze, say).
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.adaptive.enabled": "false",
        "spark.databricks.delta.stats.skipping": "false",
        # A query reads each table's latest snapshot, and by default first lists its log for commits
        # made since by other processes: once per table per query, four tables behind a serving
        # view. With a bound on how stale that snapshot may be, Delta refreshes it in the background
        # instead (measured with the two view changes of docs/design.md, "Serving").
        "spark.databricks.delta.stalenessLimit": f"{staleness}ms",
    }
    confs.update(metrics_confs(settings))
    if settings.metastore_url:
        conf_dir = settings.service_dir() / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        site = conf_dir / "hive-site.xml"
        site.touch(mode=0o600)
        site.write_text(hive_site(settings))
        class_path += [str(conf_dir), metastore_driver_jar(settings)]
        confs["spark.sql.catalogImplementation"] = "hive"
    # The Thrift server's sessions load classes through Hive's class loader, which sees the JVM's
    # class path and not spark.jars: Delta's classes go on both.
    confs["spark.driver.extraClassPath"] = os.pathsep.join(class_path)
    return confs


class Registrar:
    """Keeps the catalog in step with the tables that exist: all of them at start, new ones after.

    A metastore remembers its tables across restarts: those it already maps to their own location
    are left as they are. Views are defined again at each start, from this version's code."""

    def __init__(self, spark, settings: Settings):
        self.spark, self.settings = spark, settings
        self.registered: set[str] = self._tables_kept()
        # Views are defined at the first registration, then again only with the tables they read.
        self.views_defined = False

    def _tables_kept(self) -> set[str]:
        from lakehouse.storage.catalog import registrable_tables

        catalog = self.spark._jsparkSession.sharedState().externalCatalog()
        kept = set()
        for table in registrable_tables():
            if (
                catalog.databaseExists(table.schema)
                and catalog.tableExists(table.schema, table.name)
                and catalog.getTable(table.schema, table.name).location().toString() == table.uri(self.settings)
            ):
                kept.add(table.qualified_name)
        return kept

    def register_new(self) -> list[str]:
        from py4j.protocol import Py4JError

        from lakehouse.storage.catalog import register_tables

        created = self._created_since()
        if not created and self.views_defined:
            return []
        # Delta caches a DeltaLog per path, also one for a table that did not exist yet, and its
        # existence check reads that cached state: forget it for the tables created since, so that
        # they are seen (none of them is queried yet, so nothing is lost).
        jvm = self.spark._jvm
        for uri in created:
            try:
                jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(
                    self.spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(uri)
                )
            except Py4JError:
                break
        added = register_tables(self.spark, self.settings, skip=frozenset(self.registered))
        self.registered.update(added)
        self.views_defined = True
        return added

    def _created_since(self) -> list[str]:
        """The locations of the tables not registered yet that now have a commit, asked of storage
        (delta-rs): a check of every table every few seconds costs the driver's JVM nothing. Asking
        the JVM instead (forgetting its cached log of each of the 56 tables, then its existence
        check) kept an idle service's JVM at a tenth of a core."""
        from lakehouse.storage.catalog import registrable_tables, table_in_storage

        unregistered = (table for table in registrable_tables() if table.qualified_name not in self.registered)
        return [uri for table in unregistered if table_in_storage(uri := table.uri(self.settings), self.settings)]


def _new_write_token(settings: Settings) -> str:
    """A new secret per start for the platform's jobs, in a file only this user may read."""
    token = secrets.token_urlsafe(32)
    path = settings.service_dir() / "write-token"
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token)
    return token


def thrift_key_store(settings: Settings) -> tuple[str, str]:
    """The Thrift endpoint's key store and its password, made anew at each start: a certificate for
    the service's address (and that address's names) from the service home's authority, beside the
    trust store JDBC clients are given. The password is random and lives in this process alone."""
    authority = ServiceState.of(settings).authority
    pem = authority.folder / "thrift.pem"
    authority.issue(pem, settings.bind_address)
    authority.write_trust_store()
    store, password = authority.folder / "thrift.p12", secrets.token_urlsafe(24)
    java_key_store(pem, store, password)
    return str(store), password


def serve(settings: Settings) -> None:
    """Start both endpoints, say so in the state file, and keep the catalog current until SIGTERM."""
    from lakehouse.storage.spark import build_spark_session

    # The Thrift server keeps its sessions' Hive state in an in-memory Derby, whose log would land
    # wherever the service was started.
    derby_log = f"-Dderby.stream.error.file={settings.service_dir() / 'derby.log'}"
    driver = settings.replace(driver_java_options=f"{settings.driver_java_options} {derby_log}".strip())
    spark = build_spark_session(driver, "lakehouse-service", service_confs(settings))
    read_only = spark._jvm.lakehouse.serving.ReadOnlyExtension
    read_only.setWritable(spark._jsparkSession, True)
    write_token = _new_write_token(settings)
    read_only.setWriteToken(write_token)
    register_query_log(spark, settings)
    # Who may log in, before either endpoint opens: the users file's people, and the jobs with the token.
    spark._jvm.lakehouse.serving.QueryLog.configure(str(query_log_dir(settings)))
    spark._jvm.lakehouse.serving.Logins.configure(str(users_file(settings)), JOBS_USER, write_token)
    registrar = Registrar(spark, settings)
    kept = set(registrar.registered)
    added = registrar.register_new()
    # Spark's Thrift server, over TLS, whose sessions open only with the settings a read-only session may have.
    thrift = spark._jvm.lakehouse.serving.ReadOnlyThriftServer.start(spark._jsparkSession, *thrift_key_store(settings))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    cache = BatchCache(spark, settings)
    cache.refresh(registrar.registered)
    write_metrics_target(spark, settings)
    state = ServiceState.of(settings)
    tick = _tick_seconds(settings)
    SnapshotWarmer(spark, settings, registrar.registered).start(stopping, tick)
    state.write_ready(os.getpid(), sorted(registrar.registered))
    print(json.dumps({"ready": True, "kept": sorted(kept), "registered": sorted(added)}), flush=True)
    try:
        _keep_current(registrar, cache, state, stopping, tick)
    finally:
        state.clear()
        thrift.stop()
        spark.stop()


def _tick_seconds(settings: Settings) -> float:
    """How often the cached batch tables are checked: twice within the staleness bound, at most 1 s."""
    return min(1.0, max(0.1, parse_duration(settings.sql_staleness).total_seconds() / 2))


def _keep_current(registrar, cache, state, stopping: threading.Event, tick: float) -> None:
    """Until stopped: the cached batch tables rebuilt when they move, new tables registered every few seconds.

    Args:
        registrar: the catalog's registrar.
        cache: the cached batch tables.
        state: the service's state file, rewritten when tables are registered.
        stopping: set by SIGTERM or SIGINT.
        tick: seconds between two checks of the cached tables.
    """
    next_registration = time.monotonic() + REGISTER_EVERY_SECONDS
    while not stopping.wait(tick):
        if time.monotonic() >= next_registration:
            next_registration = time.monotonic() + REGISTER_EVERY_SECONDS
            added = registrar.register_new()
            if added:
                state.write_ready(os.getpid(), sorted(registrar.registered))
                print(json.dumps({"registered": added}), flush=True)
        cache.refresh(registrar.registered)


def main() -> None:
    settings = Settings.from_env().replace(spark_remote="")  # the service is the Spark the jobs reach
    Path(settings.service_dir()).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    serve(settings)
    print(json.dumps({"stopped": True, "served_seconds": round(time.monotonic() - started)}), flush=True)


if __name__ == "__main__":
    main()
