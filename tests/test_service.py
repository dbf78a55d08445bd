"""The Spark service (lakehouse serve) on real components: its JVM serving Spark Connect and the
Thrift server, a Hive metastore in the PostgreSQL that scripts/airflow.sh runs, beeline from
pyspark's JARs as the JDBC client, and the `lakehouse` CLI as a user runs it. One service for the
module, whose clients log in as an analyst the module adds (an operator reads the query log); the
restart test comes last."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.eventtime import parse_duration, parse_instant
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.batch import BatchLayer
from lakehouse.layers.corrections import CorrectionRun
from lakehouse.location import local_path
from lakehouse.services.certificates import Authority
from lakehouse.services.spark_service import ServiceState, jdbc_url
from lakehouse.settings import LOOPBACK, Settings
from lakehouse.storage.catalog import CORRECTIONS, DATA_QUALITY, ensure_pipeline_tables, ensure_table, pipeline_tables
from lakehouse.storage.ops_tables import read_rows
from lakehouse.vocabulary import JOBS_USER, QueryOutcome, Role, RunStatus, Source, SqlEndpoint
from tests.airflow_env import airflow_env, migrate_scratch_db
from tests.conftest import make_settings
from tests.frames import inline_frame
from tests.services import beeline_command, free_port
from tests.test_dags import stream_a_late_straggler

pytestmark = [pytest.mark.slow, pytest.mark.services]
PROJECT = Path(__file__).resolve().parents[1]
PIPELINE = get_pipeline("toll_traffic")
W1, W2, W3, W4 = (datetime(2026, 3, 2, 8, minute) for minute in range(4))


def _gold_rows(spark, settings):
    """Speed: two windows, then a third in a second version; batch: the first window, recomputed."""
    tables = ensure_pipeline_tables(settings, PIPELINE)
    speed = [(W1, W2, "B1", "car", 3, Decimal("7.50"), 0, W2), (W2, W3, "B2", "truck", 1, Decimal("9.00"), 0, W3)]
    later = [(W3, W4, "B1", "car", 2, Decimal("5.00"), 1, W4)]
    batch = [(W1, W2, "B1", "car", 4, Decimal("10.00"), "run-1", W4)]
    for table, rows in ((tables.speed, speed), (tables.speed, later), (tables.batch, batch)):
        frame = inline_frame(spark, table.columns, rows)
        frame.write.format("delta").mode("append").save(table.uri(settings))
    return tables


@pytest.fixture(scope="module")
def service(spark, tmp_path_factory):
    """A lakehouse with gold rows, and its service on free ports with its catalog in PostgreSQL."""
    # PostgreSQL runs as its own user: its cluster must be under a folder that user can enter.
    airflow_home = PROJECT / ".cache" / "service-tests"
    shutil.rmtree(airflow_home, ignore_errors=True)
    home = tmp_path_factory.mktemp("served")
    settings = make_settings(home)
    tables = _gold_rows(spark, settings)
    postgres = {**os.environ, "AIRFLOW_HOME": str(airflow_home), "AIRFLOW_PG_PORT": str(free_port())}
    script = str(PROJECT / "scripts" / "airflow.sh")
    exports = subprocess.run([script, "metastore"], env=postgres, capture_output=True, text=True, check=True).stdout
    metastore = dict(line.removeprefix("export ").replace("'", "").split("=", 1) for line in exports.splitlines())
    env = {
        **os.environ,
        **metastore,
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_CONNECT_PORT": str(free_port()),
        "LAKEHOUSE_THRIFT_PORT": str(free_port()),
    }
    env |= _logins(env, home)
    try:
        started = time.monotonic()
        out = lakehouse(env, "serve", timeout=400)
        assert out.returncode == 0, out.stdout + out.stderr + (home / "service" / "server.log").read_text()[-3000:]
        print(f"\nservice started in {time.monotonic() - started:.0f}s")
        yield env, settings, tables
    finally:
        lakehouse(env, "serve", "--stop", timeout=120)
        subprocess.run([script, "stop"], env=postgres, capture_output=True, timeout=120)


ANALYST, OPERATOR = "ana", "ops"


def _logins(env, home: Path) -> dict[str, str]:
    """Every client of the module logs in as an analyst (LAKEHOUSE_SQL_USER, _PASSWORD, and a password
    file for beeline); an operator's password is kept for the query log's tests."""
    added = {}
    for name, role in ((ANALYST, Role.ANALYST), (OPERATOR, Role.OPERATOR)):
        out = lakehouse(env, "users", "add", name, "--role", role)
        assert out.returncode == 0, out.stderr
        added[name] = out.stdout.splitlines()[-1]
    for name, secret in added.items():
        (home / f"{name}.password").touch(mode=0o600)
        (home / f"{name}.password").write_text(secret)
    return {
        "LAKEHOUSE_SQL_USER": ANALYST,
        "LAKEHOUSE_SQL_PASSWORD": added[ANALYST],
        "TEST_PASSWORD_FILE": str(home / f"{ANALYST}.password"),
    }


def password_of(env, user: str) -> str:
    return (Path(env["LAKEHOUSE_HOME"]) / f"{user}.password").read_text()


def connect_client(env) -> tuple[str, dict[str, str]]:
    """A Connect client's URL and environment, logged in as the analyst the way a notebook is: the user
    and token from SPARK_USER and SPARK_CONNECT_AUTHENTICATE_TOKEN, to "localhost" (gRPC sends a token
    without TLS there only)."""
    login = {"SPARK_USER": env["LAKEHOUSE_SQL_USER"], "SPARK_CONNECT_AUTHENTICATE_TOKEN": env["LAKEHOUSE_SQL_PASSWORD"]}
    return f"sc://localhost:{env['LAKEHOUSE_CONNECT_PORT']}", {**env, **login}


def jdbc(env) -> str:
    """The service's JDBC URL on this machine: over TLS, trusting the authority in its home alone."""
    trust_store = ServiceState.of(Settings.from_env(env)).authority.trust_store
    return jdbc_url(LOOPBACK, int(env["LAKEHOUSE_THRIFT_PORT"]), trust_store)


def connect_line(env, url: str) -> str:
    """beeline's !connect as the analyst, for a script file (a password there is in no command line)."""
    return f"!connect {url} {env['LAKEHOUSE_SQL_USER']} {env['LAKEHOUSE_SQL_PASSWORD']}"


def lakehouse(env, *args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def beeline(env, statement: str, *options: str, login: bool = True) -> subprocess.CompletedProcess:
    """A fresh JDBC client on this machine, logged in as the analyst, its password read from a file
    (-w), not the command line."""
    url = jdbc(env)
    credentials = ["-n", env["LAKEHOUSE_SQL_USER"], "-w", env["TEST_PASSWORD_FILE"]] if login else []
    command = beeline_command(url, statement, *credentials, *options)
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def csv_rows(out: subprocess.CompletedProcess) -> list[str]:
    """beeline's csv2 rows, header first: the header follows the prompt on its line."""
    lines = (line.split("> ", 1)[1] if line.startswith("0: jdbc:") else line for line in out.stdout.splitlines())
    return [line for line in lines if line]


def test_status_reports_both_endpoints_and_the_metastore(service):
    env, _, _ = service
    out = lakehouse(env, "serve", "--status")

    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["up"] is True
    assert report["connect"] == f"sc://127.0.0.1:{env['LAKEHOUSE_CONNECT_PORT']}"
    assert report["jdbc"] == jdbc(env)
    assert report["catalog"] == "metastore"


def test_the_service_serves_sparks_own_metrics_on_loopback_where_prometheus_finds_them(service):
    import urllib.request

    _, settings, _ = service
    [target] = json.loads((settings.metrics_dir() / "spark" / "service.json").read_text())
    [address] = target["targets"]
    assert address.startswith("127.0.0.1:")
    with urllib.request.urlopen(f"http://{address}/metrics/prometheus/", timeout=60) as answer:
        text = answer.read().decode()
    assert "metrics_lakehouse_service_driver_BlockManager_memory_memUsed_MB_Value" in text
    assert "metrics_lakehouse_service_driver_DAGScheduler_job_allJobs_Value" in text
    with urllib.request.urlopen(f"http://{address}/metrics/executors/prometheus", timeout=60) as answer:
        assert 'executor_id="driver"' in answer.read().decode()


def test_a_fresh_jdbc_client_sees_the_gold_tables_and_views(service):
    env, _, _ = service
    out = beeline(env, "SHOW TABLES IN gold")

    assert out.returncode == 0, out.stderr[-2000:]
    names = {row.split(",")[1] for row in csv_rows(out)[1:]}
    assert {"toll_traffic", "toll_traffic__speed", "toll_traffic__batch", "toll_traffic__retracting"} <= names


def test_lakehouse_sql_reads_the_serving_view_through_the_service_without_a_jvm_of_its_own(service):
    env, _, _ = service
    # No java on the PATH: an embedded session could not start, the service answers all the same.
    no_java = {**env, "PATH": os.path.dirname(sys.executable), "JAVA_HOME": "/nonexistent"}
    query = "SELECT window_start, bridge_id, vehicles, source FROM gold.toll_traffic ORDER BY window_start"

    out = lakehouse(no_java, "sql", query, "--format", "json")

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [
        {"window_start": "2026-03-02T08:00:00", "bridge_id": "B1", "vehicles": 4, "source": "batch"},
        {"window_start": "2026-03-02T08:01:00", "bridge_id": "B2", "vehicles": 1, "source": "speed"},
        {"window_start": "2026-03-02T08:02:00", "bridge_id": "B1", "vehicles": 2, "source": "speed"},
    ]


def test_a_spark_connect_client_reads_the_serving_view(service):
    env, _, _ = service
    script = (
        "import sys; from pyspark.sql import SparkSession;"
        "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate();"
        "print(s.table('gold.toll_traffic').groupBy('source').count().orderBy('source').collect())"
    )
    url, client = connect_client(env)

    out = subprocess.run([sys.executable, "-c", script, url], env=client, capture_output=True, text=True, timeout=120)

    assert out.stdout.strip() == "[Row(source='batch', count=1), Row(source='speed', count=2)]", out.stderr


# A job's rows reach it as Arrow in one request (lakehouse.storage.spark.to_arrow); pyspark's toArrow
# first asks for the plan's schema in another.
TO_ARROW_PROBE = """
import sys
from pyspark.sql import SparkSession
from lakehouse.storage.spark import to_arrow
session = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
frame = session.table("gold.toll_traffic")
analysed = []
analyse = session.client._analyze
session.client._analyze = lambda *args, **kwargs: analysed.append(kwargs.get("method")) or analyse(*args, **kwargs)
ours = to_arrow(frame)
print(len(analysed), ours.num_rows, ours.equals(frame.toArrow()), ours.schema == frame.toArrow().schema)
"""


def test_a_jobs_rows_come_as_arrow_in_one_request_and_equal_pysparks_toarrow(service):
    env, _, _ = service
    url, client = connect_client(env)

    out = subprocess.run(
        [sys.executable, "-c", TO_ARROW_PROBE, url], env=client, capture_output=True, text=True, timeout=120
    )

    assert out.stdout.split() == ["0", "3", "True", "True"], out.stderr[-3000:]


def _speed_version(settings) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(local_path(settings.table_uri("gold", f"{PIPELINE.name}__speed")))).version()


def test_every_way_in_refuses_a_write_and_the_table_keeps_its_version(service):
    env, settings, _ = service
    version = _speed_version(settings)
    update = "UPDATE gold.toll_traffic__speed SET vehicles = vehicles + 1"
    connect_write = (
        "import sys; from pyspark.sql import SparkSession;"
        "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate();"
        "s.range(1).write.format('delta').mode('append').saveAsTable('gold.toll_traffic__speed')"
    )
    url, client = connect_client(env)

    jdbc = beeline(env, update)
    cli = lakehouse(env, "sql", update)
    connect = subprocess.run(
        [sys.executable, "-c", connect_write, url], env=client, capture_output=True, text=True, timeout=120
    )

    assert jdbc.returncode != 0 and "read-only: UpdateTable changes data" in jdbc.stderr + jdbc.stdout
    assert cli.returncode == 2 and cli.stderr.startswith("lakehouse: error: read-only: UpdateTable")
    assert cli.stderr.count("\n") == 1
    assert connect.returncode != 0 and "read-only: " in connect.stderr
    assert _speed_version(settings) == version


def _versions(settings) -> dict[str, int]:
    """Every Delta table's version in the home, by its folder: a table an attempt created shows too."""
    from deltalake import DeltaTable

    logs = local_path(settings.warehouse_uri).rglob("_delta_log")
    return {str(log.parent): DeltaTable(str(log.parent)).version() for log in logs}


SERVER_CODE = {
    "TRANSFORM": "SELECT TRANSFORM(bridge_id) USING 'touch {probe}/transform' AS (x) FROM gold.toll_traffic__speed",
    "CREATE FUNCTION": "CREATE FUNCTION gold.f AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
    "ADD JAR": "ADD JAR {probe}/no-such.jar",
    "ADD FILE": "ADD FILE /etc/hostname",
    "CACHE": "CACHE TABLE gold.toll_traffic__speed",
    "SET": "SET spark.lakehouse.readOnly = false",
    "UPDATE on the view": "UPDATE gold.toll_traffic SET vehicles = 0",
    "INSERT on the view": "INSERT INTO gold.toll_traffic SELECT * FROM gold.toll_traffic",
    "DELETE on the view": "DELETE FROM gold.toll_traffic",
}


def test_no_analyst_code_runs_through_sql_or_jdbc_and_nothing_changes(service, tmp_path):
    env, settings, _ = service
    probe = tmp_path / "probe"
    probe.mkdir(mode=0o777)
    versions = _versions(settings)
    statements = [statement.format(probe=probe) for statement in SERVER_CODE.values()]

    script = tmp_path / "statements.sql"
    script.write_text(";\n".join(statements) + ";\n")
    jdbc = beeline(env, "", "--force=true", "-f", str(script))
    cli = {statement: lakehouse(env, "sql", statement) for statement in statements}

    errors = [line for line in (jdbc.stdout + jdbc.stderr).splitlines() if line.startswith("Error: ")]
    refused = [error for error in errors if "read-only: " in error]
    assert len(refused) == len(statements), [error[:300] for error in errors if error not in refused]
    for statement, out in cli.items():
        assert out.returncode == 2 and out.stderr.startswith("lakehouse: error: read-only: "), (statement, out.stderr)
    assert not list(probe.iterdir())
    assert _versions(settings) == versions


def test_the_service_reads_no_file_but_its_delta_tables(service):
    env, _, _ = service
    # SQL on files is off in the service: its own files are not tables, and no schema is inferred.
    out = lakehouse(env, "sql", "SELECT * FROM text.`/etc/hostname`")

    assert out.returncode == 2 and "[TABLE_OR_VIEW_NOT_FOUND]" in out.stderr and "`text`.`/etc/hostname`" in out.stderr


@pytest.fixture(scope="module")
def elsewhere(spark, tmp_path_factory) -> str:
    """A Delta table, with its change feed, that the service's user can read and the lakehouse does not hold."""
    path = str(tmp_path_factory.mktemp("not-the-lakehouse") / "table")
    spark.range(3).write.format("delta").option("delta.enableChangeDataFeed", "true").save(path)
    return path


def test_no_analyst_code_runs_through_connect_and_every_catalog_call_answers(service, elsewhere, tmp_path):
    env, settings, tables = service
    probe = tmp_path / "probe"
    probe.mkdir(mode=0o777)
    versions = _versions(settings)
    url, client = connect_client(env)

    out = subprocess.run(
        [sys.executable, "-m", "tests.connect_probes", url, str(probe), elsewhere, tables.speed.uri(settings)],
        env=client,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT,
    )

    report = json.loads(out.stdout.splitlines()[-1]) if out.stdout.strip() else {}
    assert report, out.stderr[-3000:]
    not_refused = [f"{name}: {said[:300]}" for name, said in report["attempts"].items() if "read-only: " not in said]
    unanswered = [f"{name}: {said[:300]}" for name, said in report["reads"].items() if said != "ran"]
    assert not not_refused, "\n".join(not_refused)
    assert "is not the location of a table of the lakehouse" in report["attempts"]["a Delta table elsewhere"]
    assert not unanswered, "\n".join(unanswered)
    assert not list(probe.iterdir())
    assert _versions(settings) == versions


def test_a_jdbc_client_reads_a_delta_table_by_path_only_when_the_lakehouse_holds_it(service, elsewhere, tmp_path):
    env, settings, tables = service
    script = tmp_path / "by-path.sql"
    script.write_text(
        f"SELECT count(*) AS n FROM table_changes_by_path('{elsewhere}', 0);\n"
        f"DESCRIBE HISTORY '{elsewhere}';\n"
        f"SELECT count(*) AS n FROM table_changes_by_path('{tables.speed.uri(settings)}', 2);\n"
    )

    out = beeline(env, "", "--force=true", "-f", str(script))

    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("Error: ")]
    assert len(errors) == 2 and all(f"read-only: file:{elsewhere} is not the location" in e for e in errors), errors
    assert csv_rows(out) == ["n", "1"], out.stderr[-2000:]


def test_a_jdbc_url_sets_only_the_settings_a_read_only_session_may_set(service, tmp_path):
    env, _, _ = service
    url = jdbc(env)
    plugin = "spark.sql.catalog.evil=org.apache.spark.sql.delta.catalog.DeltaCatalog"
    script = tmp_path / "connections.sql"
    # A URL's hive confs follow ?, its hive variables #: the Thrift server would set both in the session.
    script.write_text(
        f"{connect_line(env, f'{url}?{plugin}')}\n"
        f"{connect_line(env, f'{url}#{plugin}')}\n"
        f"{connect_line(env, f'{url}?spark.sql.session.timeZone=America/New_York')}\n"
        "SELECT current_timezone() AS zone;\n"
    )

    out = beeline(env, "", "--force=true", "-f", str(script))

    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("Error: ")]
    assert len(errors) == 2 and all("read-only: setting spark.sql.catalog.evil is not allowed" in e for e in errors)
    assert csv_rows(out)[-2:] == ["zone", "America/New_York"], out.stdout[-2000:]


def _query_log(settings) -> list[dict]:
    """The query log's lines as the service wrote them, oldest first."""
    files = sorted((settings.service_dir() / "query-log").glob("*.jsonl"))
    return [json.loads(line) for file in files for line in file.read_text().splitlines()]


def _refused_logins(lines: list[dict], endpoint: str) -> set[str]:
    return {
        line["user_name"]
        for line in lines
        if line["endpoint"] == endpoint and line["outcome"] == QueryOutcome.REFUSED and line["statement"] == ""
    }


def test_jdbc_refuses_a_login_without_the_users_own_password_and_logs_each_refusal(service, tmp_path):
    env, settings, _ = service
    url = jdbc(env)
    analysts = env["LAKEHOUSE_SQL_PASSWORD"]
    versions, logged = _versions(settings), len(_query_log(settings))
    script = tmp_path / "logins.sql"
    # None; a wrong password; a name no one has; the analyst's password under the operator's name.
    script.write_text(
        f"!connect {url} '' ''\n!connect {url} {ANALYST} wrong-{analysts}\n!connect {url} nobody {analysts}\n"
        f"!connect {url} {OPERATOR} {analysts}\nSELECT count(*) AS n FROM gold.toll_traffic;\n"
    )

    out = beeline(env, "", "--force=true", "-f", str(script), login=False)

    errors = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("Error: ")]
    # Each !connect fails (beeline tries the one without a user twice); the statement finds no connection.
    assert sum("Peer indicated failure: Error validating the login" in error for error in errors) >= 4, errors
    assert "No current connection" in out.stdout + out.stderr and not csv_rows(out)
    refused = _query_log(settings)[logged:]
    assert _refused_logins(refused, SqlEndpoint.JDBC) - {"", "anonymous"} == {ANALYST, "nobody", OPERATOR}
    assert all(line["endpoint"] == SqlEndpoint.JDBC and line["outcome"] == QueryOutcome.REFUSED for line in refused)
    assert _versions(settings) == versions


def test_an_open_jdbc_session_ends_with_its_users_removal_and_the_refusal_is_logged(service, tmp_path):
    """A JDBC connection opened before its user was removed runs nothing after: its next statement is
    refused, in one line, and logged as refused (a Connect client logs in again with each request)."""
    env, settings, _ = service
    added = lakehouse(env, "users", "add", "leaving")
    assert added.returncode == 0, added.stderr
    url = jdbc(env)
    home = f"LAKEHOUSE_HOME={env['LAKEHOUSE_HOME']}"
    remove = shlex.join(["env", home, sys.executable, "-m", "lakehouse.cli", "users", "remove", "leaving"])
    script = tmp_path / "leaving.sql"
    script.write_text(
        f"!connect {url} leaving {added.stdout.splitlines()[-1]}\nSELECT 'before' AS said;\n"
        f"!sh {remove}\nSELECT 'after' AS said;\n"
    )
    logged = len(_query_log(settings))

    out = beeline(env, "", "--force=true", "-f", str(script), login=False)

    rows = csv_rows(out)  # and the line `users remove` printed
    assert rows[:2] == ["said", "before"] and "after" not in rows, out.stdout + out.stderr
    assert "Error: not authenticated: user leaving was removed: the session ends" in out.stdout + out.stderr
    lines = [line for line in _query_log(settings)[logged:] if line["user_name"] == "leaving"]
    assert [(line["statement"], line["outcome"]) for line in lines] == [
        ("SELECT 'before' AS said", QueryOutcome.OK),
        ("SELECT 'after' AS said", QueryOutcome.REFUSED),
    ]


def test_connect_refuses_a_request_without_its_users_own_token_and_logs_each_refusal(service):
    env, settings, _ = service
    url, _ = connect_client(env)
    analysts = env["LAKEHOUSE_SQL_PASSWORD"]
    attempts = {
        "no token": [ANALYST, None],
        "a forged token": [ANALYST, f"forged-{analysts}"],
        "a name no one has": ["nobody", analysts],
        "another user's token": [OPERATOR, analysts],
        "the jobs' name without their token": [JOBS_USER, analysts],
    }
    versions, logged = _versions(settings), len(_query_log(settings))

    out = subprocess.run(
        [sys.executable, "-m", "tests.connect_probes", "--logins", url],
        input=json.dumps(attempts), capture_output=True, text=True, timeout=120, cwd=PROJECT,
    )  # fmt: skip
    cli = lakehouse({**env, "LAKEHOUSE_SQL_PASSWORD": f"wrong-{analysts}"}, "sql", "SELECT 1")

    told = json.loads(out.stdout) if out.stdout.strip() else {}
    expected = {
        name: f"not authenticated: unknown user or wrong password/token for user {user}"
        for name, (user, _) in attempts.items()
    }
    expected["no token"] = f"not authenticated: no password or token given for user {ANALYST}"
    assert told and all(expected[name] in told[name] for name in attempts), told or out.stderr[-3000:]
    assert cli.returncode == 2
    assert (
        cli.stderr == f"lakehouse: error: not authenticated: unknown user or wrong password/token for user {ANALYST}\n"
    )
    refused = _query_log(settings)[logged:]
    assert _refused_logins(refused, SqlEndpoint.CONNECT) == {ANALYST, "nobody", OPERATOR, JOBS_USER}
    assert all(line["outcome"] == QueryOutcome.REFUSED for line in refused)
    assert _versions(settings) == versions


# Clients guessing one name's secret, together, each as fast as the service answers it.
GUESSES = 1000
GUESSERS = 8
# Secrets checked before the service makes a name wait (lakehouse/serving/java/.../FailedLogins.java).
FREE_FAILURES = 10


def test_a_thousand_failed_logins_are_refused_unhashed_and_both_endpoints_answer_the_others_meanwhile(service):
    """A name under a thousand wrong guesses on Connect, 8 clients at once: after its free failures, each try
    is refused at once, without the slow hash (a thousand hashes would hold a core for minutes), with
    the wait it must keep, and guessing in parallel buys no more hashes than guessing in turn;
    meanwhile an analyst gets answers over JDBC and over Connect, and no table moves."""
    env, settings, _ = service
    url, _ = connect_client(env)
    guessed = lakehouse(env, "users", "add", "guessed")
    assert guessed.returncode == 0, guessed.stderr
    versions, logged = _versions(settings), len(_query_log(settings))
    # Each guesser a client of its own with its own wrong token (a client per guess would cost the
    # test a Connect session each, and a repeated wrong secret is hashed as a new one would be).
    guesses = [["guessed", f"guess-{number % GUESSERS}", "SELECT 1"] for number in range(GUESSES)]
    guessing = subprocess.Popen(
        [sys.executable, "-m", "tests.connect_probes", "--statements", url, "--parallel", str(GUESSERS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT,
    )  # fmt: skip
    guessing.stdin.write(json.dumps(guesses))
    guessing.stdin.close()
    jdbc = beeline(env, "SELECT count(*) AS windows FROM gold.toll_traffic__speed")
    connect = lakehouse(env, "sql", "SELECT count(*) AS windows FROM gold.toll_traffic__speed", "--format", "csv")
    told = json.loads(guessing.stdout.read() or "[]")
    assert guessing.wait(timeout=600) == 0 and len(told) == GUESSES, told[-3:]

    assert jdbc.returncode == 0 and connect.returncode == 0, (jdbc.stderr[-2000:], connect.stderr[-2000:])
    assert csv_rows(jdbc)[1:] == connect.stdout.splitlines()[1:] != []
    assert all("not authenticated: " in answer.get("error", "") for answer in told), told[:3]
    # The service's own record of each refusal (a client may send more than one request a statement).
    refused = [line for line in _query_log(settings)[logged:] if line["user_name"] == "guessed"]
    assert len(refused) >= GUESSES and all(line["outcome"] == QueryOutcome.REFUSED for line in refused)
    hashed = [line for line in refused if "unknown user or wrong password/token" in line["error"]]
    held_back = [line for line in refused if "too many failed logins for user guessed in a row" in line["error"]]
    assert len(hashed) + len(held_back) == len(refused)
    # Each wait lets one more secret be hashed once it is over: a few in the test's seconds, not a
    # thousand, and not one per guesser (hashes under way count before they fail).
    assert FREE_FAILURES <= len(hashed) <= FREE_FAILURES + 5, [line["started_at"] for line in hashed]
    print(f"\n{len(refused)} refusals for {GUESSES} statements, {len(hashed)} of them hashed")
    assert _versions(settings) == versions


def _loopback_name() -> str | None:
    """A name of this machine that resolves to 127.0.0.1 (Debian's hosts file gives its host name so),
    through which a client reaches the service as it reaches one on another host; None without one."""
    name = socket.gethostname()
    try:
        return name if socket.gethostbyname(name) == "127.0.0.1" and name != "localhost" else None
    except OSError:
        return None


@pytest.mark.skipif(_loopback_name() is None, reason="this machine's name does not resolve to 127.0.0.1")
def test_lakehouse_sql_logs_in_to_a_service_named_by_another_host_name_and_a_wrong_password_is_refused(service):
    env, _, _ = service
    remote = {**env, "LAKEHOUSE_SQL_ROUTE": f"sc://{_loopback_name()}:{env['LAKEHOUSE_CONNECT_PORT']}"}
    count = "SELECT count(*) AS n FROM gold.toll_traffic"

    read = lakehouse(remote, "sql", count, "--format", "json")
    wrong = lakehouse({**remote, "LAKEHOUSE_SQL_PASSWORD": "guessed"}, "sql", count)

    assert json.loads(read.stdout or "null") == [{"n": 3}], read.stderr
    assert wrong.returncode == 2
    assert (
        wrong.stderr
        == f"lakehouse: error: not authenticated: unknown user or wrong password/token for user {ANALYST}\n"
    )


def test_the_query_log_holds_each_statement_with_its_user_rows_and_outcome_and_only_an_operator_reads_it(
    service, tmp_path
):
    env, _, _ = service
    tag = f"logged-{time.monotonic_ns()}"
    read = f"SELECT bridge_id, '{tag}' AS tag FROM gold.toll_traffic"
    columns = "user_name, endpoint, row_count, outcome, duration_ms >= 0 AND started_at IS NOT NULL AS timed"
    log = f"SELECT {columns} FROM lakehouse.query_log WHERE statement LIKE '%{tag}%' ORDER BY started_at"
    script = tmp_path / "statements.sql"
    script.write_text(f"{read};\n{log};\n")
    url, _ = connect_client(env)
    analyst, operator = [ANALYST, env["LAKEHOUSE_SQL_PASSWORD"]], [OPERATOR, password_of(env, OPERATOR)]
    runs = [
        [*analyst, read],
        [*analyst, f"UPDATE gold.toll_traffic__speed SET bridge_id = '{tag}'"],
        [*analyst, f"SELECT '{tag}' FROM gold.no_such_table"],
        [*analyst, log],
        [*operator, log],
    ]

    jdbc = beeline(env, "", "--force=true", "-f", str(script))
    connect = subprocess.run(
        [sys.executable, "-m", "tests.connect_probes", "--statements", url],
        input=json.dumps(runs), capture_output=True, text=True, timeout=120, cwd=PROJECT,
    )  # fmt: skip

    only_operators = f"read-only: lakehouse.query_log is read by operators only, and {ANALYST} is an analyst"
    assert csv_rows(jdbc)[0] == "bridge_id,tag" and len(csv_rows(jdbc)) == 4, jdbc.stderr[-2000:]
    assert only_operators in jdbc.stdout + jdbc.stderr
    answers = json.loads(connect.stdout) if connect.stdout.strip() else connect.stderr[-3000:]
    assert len(answers[0]["rows"]) == 3 and only_operators in answers[3]["error"], answers
    assert "read-only: UpdateTable" in answers[1]["error"] and "TABLE_OR_VIEW_NOT_FOUND" in answers[2]["error"]
    jdbc_line, connect_line = (
        {"user_name": ANALYST, "endpoint": endpoint, "row_count": 3, "outcome": QueryOutcome.OK, "timed": True}
        for endpoint in (SqlEndpoint.JDBC, SqlEndpoint.CONNECT)
    )
    assert answers[4]["rows"] == [
        jdbc_line,
        {**jdbc_line, "row_count": 0, "outcome": QueryOutcome.REFUSED},  # the analyst's read of the log
        connect_line,
        {**connect_line, "row_count": 0, "outcome": QueryOutcome.REFUSED},
        {**connect_line, "row_count": 0, "outcome": QueryOutcome.FAILED},
        {**connect_line, "row_count": 0, "outcome": QueryOutcome.REFUSED},
    ], answers[4]


def _process_environments(pid: int) -> str:
    """The environment of a process and of its children (the service's driver and its JVM)."""
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return "\n".join(Path(f"/proc/{p}/environ").read_bytes().decode(errors="replace") for p in [pid, *children])


def test_no_password_or_token_shows_in_the_services_logs_its_environment_or_ps(service):
    env, settings, _ = service
    secrets = {
        "the analyst's password": env["LAKEHOUSE_SQL_PASSWORD"],
        "the operator's password": password_of(env, OPERATOR),
        "the write token": (settings.service_dir() / "write-token").read_text().strip(),
    }
    query = [sys.executable, "-m", "lakehouse.cli", "sql", "SELECT count(*) FROM gold.toll_traffic"]
    running = subprocess.Popen(query, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listings = []
    while running.poll() is None:  # every process's command line, while lakehouse sql runs
        listings.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
        time.sleep(0.2)

    assert running.returncode == 0 and any("lakehouse.cli sql SELECT" in listing for listing in listings)
    texts = {
        "ps": "\n".join(listings),
        "server.log": (settings.service_dir() / "server.log").read_text(errors="replace"),
        "the query log": json.dumps(_query_log(settings)),
        "the service's environment": _process_environments(
            json.loads((settings.service_dir() / "state.json").read_text())["pid"]
        ),
    }
    leaks = [(secret, where) for secret, value in secrets.items() for where, text in texts.items() if value in text]
    assert not leaks


def test_time_travel_and_the_change_feed_through_both_endpoints(service):
    env, _, _ = service
    as_of = "SELECT count(*) AS n FROM gold.toll_traffic__speed VERSION AS OF 1"
    changes = "SELECT count(*) AS n FROM table_changes('gold.toll_traffic__speed', 2) WHERE _change_type = 'insert'"

    for statement, expected in ((as_of, 2), (changes, 1)):
        jdbc = beeline(env, statement)
        cli = lakehouse(env, "sql", statement, "--format", "json")
        assert csv_rows(jdbc) == ["n", str(expected)], jdbc.stderr[-2000:]
        assert json.loads(cli.stdout) == [{"n": expected}], cli.stderr


def test_a_table_a_job_creates_later_is_registered_within_seconds(spark, service):
    env, settings, _ = service
    ensure_table(DATA_QUALITY, settings)

    deadline = time.monotonic() + 60
    while DATA_QUALITY.name not in lakehouse(env, "sql", "SHOW TABLES IN audit", "--format", "csv").stdout:
        assert time.monotonic() < deadline, "audit.data_quality was not registered within 60 s"
        time.sleep(1)


BACKFILL = ["--source", "log", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T08:30Z", "--chunk", "15m"]


def _home_with_a_log(root: Path) -> Settings:
    settings = make_settings(root)
    generate(settings, GeneratorConfig(events=400, events_per_file=200, seed=4))
    return settings


def _batch_rows(spark, settings: Settings) -> list:
    batch = spark.read.format("delta").load(pipeline_tables(PIPELINE).batch.uri(settings))
    return batch.drop("run_id", "updated_at").orderBy("window_start", "bridge_id", "vehicle_type").collect()


def test_the_backfill_dag_runs_its_chunks_through_the_service_and_writes_what_a_job_in_its_own_jvm_writes(
    spark, service, tmp_path
):
    """The DAG's chunks as tasks that need no Java, through the service, against the same backfill in
    the tests' own JVM (spark-submit runs that code in the Airflow tests and across hosts)."""
    env, served, _ = service
    through_dag, own_jvm = _home_with_a_log(tmp_path / "dag"), _home_with_a_log(tmp_path / "own-jvm")
    airflow_home = tmp_path / "airflow"
    migrate_scratch_db(airflow_home)
    dag_env = airflow_env(airflow_home, local_path(through_dag.home), LAKEHOUSE_LOG_RETENTION="3650d")
    dag_env |= {"LAKEHOUSE_SPARK_REMOTE": f"sc://127.0.0.1:{env['LAKEHOUSE_CONNECT_PORT']}"}
    dag_env |= {"LAKEHOUSE_SPARK_REMOTE_TOKEN": (served.service_dir() / "write-token").read_text()}
    # The tasks need no Java here, only the service's URL and write token.
    dag_env |= {"PATH": os.path.dirname(sys.executable), "JAVA_HOME": "/nonexistent"}
    conf = {"pipeline": "toll_traffic", "start": "2026-01-05T08:00:00Z", "end": "2026-01-05T08:30:00Z",
            "source": "log", "chunk": "15m", "reprocess": "redo", "dry_run": False}  # fmt: skip
    command = [str(Path(sys.executable).with_name("airflow")), "dags", "test", "lakehouse_backfill", "-c"]

    run = subprocess.run([*command, json.dumps(conf)], env=dag_env, cwd=PROJECT, capture_output=True, text=True)
    start, end = (parse_instant(conf[bound], bound) for bound in ("start", "end"))
    in_own_jvm = BatchLayer(spark, own_jvm, PIPELINE).backfill(start, end, source=Source.LOG, chunk=conf["chunk"])

    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert in_own_jvm.chunks == 2 and in_own_jvm.status == RunStatus.SUCCEEDED, in_own_jvm
    chunks = [r for r in read_rows(through_dag, "ops", "backfill_runs") if r["status"] == "succeeded"]
    assert len(chunks) == 2, "one run per chunk, each a task of the DAG"
    rows = _batch_rows(spark, through_dag)
    assert rows and rows == _batch_rows(spark, own_jvm)


def _streamed_with_a_straggler(spark, root: Path) -> Settings:
    """Ten minutes of events, then a straggler for the first minute, drained file by file: one late
    event in bronze, for a correction to fold in."""
    settings = make_settings(root)
    start = datetime(2026, 1, 5, 8, 0)
    generate(settings, GeneratorConfig(events=300, events_per_file=100, seed=4, start=start, rate=0.5))
    stream_a_late_straggler(spark, settings, first_minute=start)
    return settings


def connect_sessions_online(settings: Settings) -> int:
    """The Spark Connect sessions open on the service, as its UI's Connect page counts them."""
    import urllib.request

    [target] = json.loads((settings.metrics_dir() / "spark" / "service.json").read_text())
    with urllib.request.urlopen(f"http://{target['targets'][0]}/connect/", timeout=60) as answer:
        page = re.sub(r"<[^>]+>|\s+", " ", answer.read().decode())
    assert "Session Statistics (" in page, page[:2000]  # the Connect page, whose count of open ones
    online = re.search(r"(\d+) session\(s\) are online", page)  # shows once one is open
    return int(online[1]) if online else 0


def test_a_correction_through_the_service_writes_what_one_in_its_own_jvm_writes_row_for_row(spark, service, tmp_path):
    env, served, _ = service
    streamed = _streamed_with_a_straggler(spark, tmp_path / "streamed")
    through_service, local = make_settings(tmp_path / "connect"), make_settings(tmp_path / "local")
    for settings in (through_service, local):
        shutil.copytree(local_path(streamed.home), local_path(settings.home))
    remote = {**env, "LAKEHOUSE_HOME": str(local_path(through_service.home)), "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}
    remote |= {"LAKEHOUSE_SPARK_REMOTE": f"sc://127.0.0.1:{env['LAKEHOUSE_CONNECT_PORT']}"}
    remote |= {"LAKEHOUSE_SPARK_REMOTE_TOKEN": (served.service_dir() / "write-token").read_text()}

    sessions_before = connect_sessions_online(served)
    connect = lakehouse(remote, "correct")
    CorrectionRun(spark, local, PIPELINE).run()

    assert connect.returncode == 0, connect.stderr[-3000:]
    assert connect_sessions_online(served) == sessions_before, "the job's session on the service ends with it"
    assert _batch_rows(spark, through_service) == _batch_rows(spark, local)
    logged = [
        _rows_of(spark, CORRECTIONS.uri(settings), "run_id", "corrected_at") for settings in (through_service, local)
    ]
    assert logged[0] and logged[0] == logged[1]


def _rows_of(spark, uri: str, *processing_columns: str) -> list:
    return sorted(spark.read.format("delta").load(uri).drop(*processing_columns).collect())


def test_without_the_write_token_a_job_through_the_service_writes_nothing(service, tmp_path):
    env, _, _ = service
    home = _home_with_a_log(tmp_path / "home")
    remote = {**env, "LAKEHOUSE_HOME": str(local_path(home.home))}
    remote |= {"LAKEHOUSE_SPARK_REMOTE": f"sc://127.0.0.1:{env['LAKEHOUSE_CONNECT_PORT']}"}

    no_token = lakehouse(remote, "backfill", *BACKFILL)
    wrong_token = lakehouse({**remote, "LAKEHOUSE_SPARK_REMOTE_TOKEN": "guessed"}, "backfill", *BACKFILL)

    assert no_token.returncode == 2 and "need its write token: set LAKEHOUSE_SPARK_REMOTE_TOKEN" in no_token.stderr
    assert wrong_token.returncode == 2 and wrong_token.stderr.startswith(
        "lakehouse: error: not authenticated: unknown user or wrong password/token for user lakehouse-jobs"
    )
    assert not (local_path(home.warehouse_uri) / "gold").exists()


def _metastore(env, **tls: str):
    """A connection to the metastore's database as the service makes it: its JDBC URL's host, port,
    database and TLS settings (``tls`` overrides the latter), its user and password."""
    import psycopg

    url = urllib.parse.urlsplit(env["LAKEHOUSE_METASTORE_URL"].removeprefix("jdbc:"))
    login = {"user": env["LAKEHOUSE_METASTORE_USER"], "password": env["LAKEHOUSE_METASTORE_PASSWORD"]}
    settings = dict(urllib.parse.parse_qsl(url.query)) | tls
    return psycopg.connect(host=url.hostname, port=url.port, dbname=url.path.strip("/"), **login, **settings)


def test_the_metastore_takes_connections_over_tls_only_from_a_server_its_certificate_authority_signed(service):
    import psycopg

    env, _, _ = service
    assert "sslmode=verify-full" in env["LAKEHOUSE_METASTORE_URL"]
    with _metastore(env) as connection:
        assert connection.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError, match="no pg_hba.conf entry .* no encryption"):
        _metastore(env, sslmode="disable")
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        _metastore(env, sslrootcert="/etc/ssl/certs/ca-certificates.crt")  # a server no CA of the system signed


def test_jdbc_takes_connections_over_tls_only_from_a_server_its_certificate_authority_signed(service, tmp_path):
    import ssl

    env, settings, _ = service
    port, versions, logged = int(env["LAKEHOUSE_THRIFT_PORT"]), _versions(settings), len(_query_log(settings))
    authority = ServiceState.of(settings).authority
    trusting = ssl.create_default_context(cafile=authority.certificate)
    with socket.create_connection((LOOPBACK, port)) as raw, trusting.wrap_socket(raw, server_hostname=LOOPBACK) as tls:
        assert tls.version() in {"TLSv1.2", "TLSv1.3"}  # the certificate names the address, signed by the authority
    elsewhere = Authority(tmp_path / "elsewhere")
    elsewhere.write_trust_store()
    login = ("-n", env["LAKEHOUSE_SQL_USER"], "-w", env["TEST_PASSWORD_FILE"])
    plain = beeline_command(f"jdbc:hive2://{LOOPBACK}:{port}/default", "SELECT 1 AS one", *login)
    foreign = beeline_command(jdbc_url(LOOPBACK, port, elsewhere.trust_store), "SELECT 1 AS one", *login)

    refused = [subprocess.run(command, capture_output=True, text=True, timeout=120) for command in (plain, foreign)]

    print(*(out.stdout[-600:] + out.stderr[-600:] for out in refused), sep="\n")
    assert not any(csv_rows(out) for out in refused)
    said = [out.stdout + out.stderr for out in refused]
    assert all("Could not open client transport" in text for text in said), said
    assert "SSLHandshakeException: PKIX path validation failed" in said[1], said[1]
    assert csv_rows(beeline(env, "SELECT 1 AS one")) == ["one", "1"]  # over TLS, trusting the service's authority
    # Neither reached a login: each ended at the handshake, before a password was sent.
    assert not [line for line in _query_log(settings)[logged:] if line["outcome"] == QueryOutcome.REFUSED]
    assert _versions(settings) == versions


def metastore_tables(env) -> dict[str, int]:
    with _metastore(env) as connection:
        rows = connection.execute(
            'SELECT d."NAME", t."TBL_NAME", t."TBL_ID" FROM "TBLS" t JOIN "DBS" d ON d."DB_ID" = t."DB_ID" '
            "WHERE t.\"TBL_TYPE\" = 'EXTERNAL_TABLE'"
        ).fetchall()
    return {f"{schema}.{name}": table_id for schema, name, table_id in rows}


def test_the_catalog_lives_in_postgresql_and_survives_a_restart(service):
    env, _, _ = service
    before = metastore_tables(env)
    assert {"gold.toll_traffic__speed", "bronze.toll_traffic_events", "ops.batch_coverage"} <= set(before)

    assert lakehouse(env, "serve", "--stop").returncode == 0
    assert lakehouse(env, "serve", "--status").returncode == 1
    restarted = lakehouse(env, "serve", timeout=400)

    assert restarted.returncode == 0, restarted.stderr
    assert metastore_tables(env) == before  # the same entries: kept, not registered again
    assert "toll_traffic__speed" in beeline(env, "SHOW TABLES IN gold").stdout


def test_a_commit_by_another_process_is_answered_once_the_staleness_bound_has_passed(spark, service):
    env, settings, tables = service
    count = "SELECT count(*) AS n FROM gold.toll_traffic__batch"
    before = json.loads(lakehouse(env, "sql", count, "--format", "json").stdout)[0]["n"]
    row = [(W3, W4, "B2", "truck", 1, Decimal("9.00"), "run-2", W4)]
    inline_frame(spark, tables.batch.columns, row).write.format("delta").mode("append").save(tables.batch.uri(settings))

    # Past the bound, a query refreshes the table's state before answering, whatever it had cached.
    time.sleep(parse_duration(settings.sql_staleness).total_seconds() + 0.5)
    after = lakehouse(env, "sql", count, "--format", "json")

    assert json.loads(after.stdout) == [{"n": before + 1}], after.stderr


def test_a_taken_port_is_a_one_line_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_CONNECT_PORT": str(port)}
        out = lakehouse(env, "serve")

    assert out.returncode == 2
    message = f"port {port} is taken: stop what listens there or choose another (LAKEHOUSE_CONNECT_PORT)"
    assert out.stderr == f"lakehouse: error: {message}\n"
