"""SQL latency: point queries and aggregates over a day of windows, answered by the warm Spark
service (a Spark Connect client) and by a ``lakehouse sql`` process per query (its own JVM, the
embedded path), side by side on the same tables. Through the service, each round runs every query
through Connect and through JDBC (a Java client on one connection, as a BI tool keeps), first with
the batch layer's tables uncached (the serving view as it was before the service cached them,
lakehouse.serving.batch_cache), then cached, alternating, so both are measured on the same machine
in the same minutes.

The service is the run's (bench.service), on the data set's home. Its client runs in a
process of its own (``python -m bench.sql_latency URL QUERIES_JSON ROUNDS``): a Connect session turns
pyspark's column functions into Connect ones for the whole process, which the bench's own session
must not see. The client runs every query once to warm up (its plans, the JIT) and reports that
round apart. Both sides must return the same rows, or the comparison would be of different work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench.data import DataSet
from bench.measure import percentile, percentiles
from bench.service import SharedService
from lakehouse.settings import PROJECT_ROOT

JDBC_CLIENT = Path(__file__).parent / "java" / "JdbcLatency.java"
CACHE_STATES = ("uncached", "cached")

BIN = Path(sys.executable).parent
VIEW = "gold.toll_traffic"


def lookup(window_start: datetime) -> str:
    """One window's rows of the serving view."""
    return (
        f"SELECT window_start, bridge_id, vehicle_type, vehicles, revenue, source FROM {VIEW} "
        f"WHERE window_start = TIMESTAMP '{window_start.replace(second=0, microsecond=0)}' "
        "ORDER BY bridge_id, vehicle_type"
    )


# Aggregates over the whole serving view, as a dashboard's panels ask.
AGGREGATES = (
    f"SELECT bridge_id, sum(vehicles) AS vehicles, sum(revenue) AS revenue FROM {VIEW} GROUP BY 1 ORDER BY 1",
    f"SELECT date_trunc('hour', window_start) AS hour, sum(vehicles) AS vehicles FROM {VIEW} GROUP BY 1 ORDER BY 1",
    f"SELECT window_start, bridge_id, revenue FROM {VIEW} ORDER BY revenue DESC, window_start, bridge_id LIMIT 10",
    f"SELECT vehicle_type, source, count(*) AS windows, sum(vehicles) AS vehicles FROM {VIEW} GROUP BY 1, 2 "
    "ORDER BY 1, 2",
    f"SELECT count(DISTINCT window_start) AS windows, sum(vehicles) AS vehicles, max(updated_at) AS newest FROM {VIEW}",
)


def queries(data: DataSet, points: int, aggregates: int) -> list[str]:
    """``points`` one-window lookups spread over the day, then up to five aggregates over all of it."""
    step = timedelta(days=data.days) / points
    return [lookup(data.start + i * step) for i in range(points)] + list(AGGREGATES[:aggregates])


def _through_cli(data: DataSet, statements: list[str]) -> tuple[list[float], list[str]]:
    """Each statement as its own ``lakehouse sql`` process, as an analyst without the service runs it."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(data.home), "LAKEHOUSE_SQL_ROUTE": "embedded"}
    seconds, answers = [], []
    for statement in statements:
        began = time.perf_counter()
        done = subprocess.run(
            [str(BIN / "lakehouse"), "sql", statement, "--format", "json"], env=env, capture_output=True, text=True
        )
        seconds.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise RuntimeError(f"lakehouse sql failed: {done.stderr.strip()}")
        answers.append(json.dumps(json.loads(done.stdout), sort_keys=True))
    return seconds, answers


def _through_service(service: SharedService, statements: list[str], rounds: int) -> dict:
    url = service.connect_url()  # started here, the first time
    token = (service.settings.service_dir() / "write-token").read_text().strip()
    # The secrets in the client's environment, not its arguments, which `ps` shows.
    env = {**os.environ, **service.login(), "LAKEHOUSE_SPARK_REMOTE_TOKEN": token}
    arguments = [url, json.dumps(statements), str(rounds), service.jdbc_url()]
    done = subprocess.run(
        [sys.executable, "-m", "bench.sql_latency", *arguments], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Connect client failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _jdbc_class_path() -> str:
    """The JDBC client compiled into .cache/bench-java (again when its source is newer), with pyspark's
    JARs (the Hive driver)."""
    from pyspark.find_spark_home import _find_spark_home

    jars = str(Path(_find_spark_home()) / "jars" / "*")
    classes = PROJECT_ROOT / ".cache" / "bench-java"
    compiled = classes / "JdbcLatency.class"
    if not compiled.is_file() or compiled.stat().st_mtime < JDBC_CLIENT.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", jars, "-d", str(classes), str(JDBC_CLIENT)], check=True)
    return f"{classes}{os.pathsep}{jars}"


def _through_jdbc(jdbc_url: str, statements: list[str]) -> list[float]:
    """Each statement timed once on one JDBC connection, after a warm-up pass on it."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as listing:
        listing.write("\n".join(statements) + "\n")
        listing.flush()
        command = ["java", "-cp", _jdbc_class_path(), "JdbcLatency", jdbc_url, listing.name]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [float(line) for line in done.stdout.split()]


def jdbc_client_command(jdbc_url: str, statements: list[str], seconds: float) -> list[str]:
    """The JDBC client's command that runs the statements in turn for ``seconds`` (after the first
    one), printing when the timed queries began, then each one's seconds: the statements go in a
    file the client reads first."""
    listing = Path(tempfile.mkdtemp(prefix="jdbc-statements-")) / "statements.sql"
    listing.write_text("\n".join(statements) + "\n")
    return ["java", "-cp", _jdbc_class_path(), "JdbcLatency", jdbc_url, str(listing), str(seconds)]


def sql_latency(
    data: DataSet, service: SharedService, runs: int, points: int, aggregates: int, cli_queries: int | None = None
) -> dict:
    """p50/p95 of the queries through the warm service and as a ``lakehouse sql`` process each.

    Args:
        data: the data set whose tables are queried.
        service: the run's Spark service on that home.
        runs: timed rounds of every query through the service.
        points: one-window lookups.
        aggregates: aggregates over the whole day (at most five).
        cli_queries: how many of the statements (the last ones) a ``lakehouse sql`` process runs; None: all.
    """
    statements = queries(data, points, aggregates)
    served = _through_service(service, statements, runs)
    # One round: each of its queries is a whole JVM's life already, and a round takes minutes. The
    # last ``cli_queries`` statements only, when given (the smoke run's budget).
    cli_seconds, answers = _through_cli(data, statements[-(cli_queries or len(statements)) :])
    if answers != served["answers"][-len(answers) :]:
        raise RuntimeError("the service and lakehouse sql returned different rows for the same queries")
    timed = served["timed"]
    return {
        "queries": {"points": points, "aggregates": min(aggregates, len(statements) - points)},
        "service_start_s": service.started_s,
        "jobs": {
            "service": percentiles(timed["cached"]["connect"])
            | {"first_round_p50_s": percentile(served["first_round"], 0.5)},
            "cli": percentiles(cli_seconds),
            **{
                f"{way}_{state}": percentiles(timed[state][way])
                for state in CACHE_STATES
                for way in ("connect", "jdbc")
            },
        },
    }


def client(url: str, statements: list[str], rounds: int, jdbc_url: str) -> dict:
    """In its own process: a warm-up round, then ``rounds`` timed rounds of every statement, through
    Connect and JDBC, with the batch tables uncached then cached. An analyst's session times the
    queries (logged in from LAKEHOUSE_SQL_USER, _PASSWORD); a session with the write token
    (LAKEHOUSE_SPARK_REMOTE_TOKEN) switches the cache, and leaves it as the service keeps it."""
    from lakehouse.serving.batch_cache import cached_tables
    from lakehouse.storage.spark import WRITE_TOKEN_CONF, connect_builder
    from lakehouse.vocabulary import JOBS_USER

    token = os.environ["LAKEHOUSE_SPARK_REMOTE_TOKEN"]
    analyst = connect_builder(url, os.environ["LAKEHOUSE_SQL_USER"], os.environ["LAKEHOUSE_SQL_PASSWORD"]).create()
    operator = connect_builder(url, JOBS_USER, token).create()
    operator.conf.set(WRITE_TOKEN_CONF, token)
    names = [t.qualified_name for t in cached_tables() if operator.catalog.tableExists(t.qualified_name)]

    def run(statement: str) -> tuple[float, str]:
        began = time.perf_counter()
        rows = analyst.sql(statement).collect()
        elapsed = time.perf_counter() - began
        records = [{k: _json_value(v) for k, v in row.asDict().items()} for row in rows]
        return elapsed, json.dumps(records, sort_keys=True)

    def cache(state: str) -> None:
        for name in names:
            operator.sql(f"UNCACHE TABLE IF EXISTS {name}" if state == "uncached" else f"CACHE TABLE {name}")

    answers: dict[str, list[str]] = {}
    timed = {state: {"connect": [], "jdbc": []} for state in CACHE_STATES}
    first: list[float] = []
    for state in CACHE_STATES:
        cache(state)
        warm = [run(statement) for statement in statements]
        first, answers[state] = [seconds for seconds, _ in warm], [answer for _, answer in warm]
    if answers["uncached"] != answers["cached"]:
        raise RuntimeError("the serving view answered differently with the batch tables cached")
    for _ in range(rounds):
        for state in CACHE_STATES:
            cache(state)
            timed[state]["connect"] += [run(s)[0] for s in statements]
            timed[state]["jdbc"] += _through_jdbc(jdbc_url, statements)
    return {"first_round": first, "timed": timed, "answers": answers["cached"]}


def _json_value(value):
    """As ``lakehouse sql --format json`` writes it."""
    from lakehouse.serving.sql import json_value

    return json.loads(json.dumps(json_value(value)))


if __name__ == "__main__":
    url, statements, rounds, jdbc_url = sys.argv[1:5]
    print(json.dumps(client(url, json.loads(statements), int(rounds), jdbc_url)))
