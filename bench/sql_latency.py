"""SQL latency: point queries and aggregates over a day of windows, answered by the warm Spark
service (a Spark Connect client) and by a ``lakehouse sql`` process per query (its own JVM, the
embedded path), side by side on the same tables.

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
import time
from datetime import timedelta
from pathlib import Path

from bench.data import DataSet
from bench.measure import percentile
from bench.service import SharedService

BIN = Path(sys.executable).parent
VIEW = "gold.toll_traffic"


def queries(data: DataSet, points: int, aggregates: int) -> list[str]:
    """``points`` one-window lookups spread over the day, then up to five aggregates over all of it."""
    step = timedelta(days=data.days) / points
    lookups = [
        f"SELECT window_start, bridge_id, vehicle_type, vehicles, revenue, source FROM {VIEW} "
        f"WHERE window_start = TIMESTAMP '{(data.start + i * step).replace(second=0, microsecond=0)}' "
        "ORDER BY bridge_id, vehicle_type"
        for i in range(points)
    ]
    summaries = [
        f"SELECT bridge_id, sum(vehicles) AS vehicles, sum(revenue) AS revenue FROM {VIEW} GROUP BY 1 ORDER BY 1",
        f"SELECT date_trunc('hour', window_start) AS hour, sum(vehicles) AS vehicles FROM {VIEW} GROUP BY 1 ORDER BY 1",
        f"SELECT window_start, bridge_id, revenue FROM {VIEW} ORDER BY revenue DESC, window_start, bridge_id LIMIT 10",
        f"SELECT vehicle_type, source, count(*) AS windows, sum(vehicles) AS vehicles FROM {VIEW} GROUP BY 1, 2 "
        "ORDER BY 1, 2",
        f"SELECT count(DISTINCT window_start) AS windows, sum(vehicles) AS vehicles, max(updated_at) AS newest "
        f"FROM {VIEW}",
    ]
    return lookups + summaries[:aggregates]


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


def _through_service(url: str, statements: list[str], rounds: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.sql_latency", url, json.dumps(statements), str(rounds)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Connect client failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


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
    served = _through_service(service.connect_url(), statements, runs)
    # One round: each of its queries is a whole JVM's life already, and a round takes minutes. The
    # last ``cli_queries`` statements only, when given (the smoke run's budget).
    cli_seconds, answers = _through_cli(data, statements[-(cli_queries or len(statements)) :])
    if answers != served["answers"][-len(answers) :]:
        raise RuntimeError("the service and lakehouse sql returned different rows for the same queries")
    return {
        "queries": {"points": points, "aggregates": min(aggregates, len(statements) - points)},
        "service_start_s": service.started_s,
        "jobs": {
            "service": _percentiles(served["timed"]) | {"first_round_p50_s": percentile(served["first_round"], 0.5)},
            "cli": _percentiles(cli_seconds),
        },
    }


def _percentiles(seconds: list[float]) -> dict:
    return {
        "p50_s": round(percentile(seconds, 0.5), 3),
        "p95_s": round(percentile(seconds, 0.95), 3),
        "n": len(seconds),
    }


def client(url: str, statements: list[str], rounds: int) -> dict:
    """In its own process: a warm-up round, then ``rounds`` timed rounds of every statement."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()

    def run(statement: str) -> tuple[float, str]:
        began = time.perf_counter()
        rows = spark.sql(statement).collect()
        elapsed = time.perf_counter() - began
        records = [{k: _json_value(v) for k, v in row.asDict().items()} for row in rows]
        return elapsed, json.dumps(records, sort_keys=True)

    first = [run(statement) for statement in statements]
    timed = [run(statement)[0] for _ in range(rounds) for statement in statements]
    return {"first_round": [s for s, _ in first], "timed": timed, "answers": [a for _, a in first]}


def _json_value(value):
    """As ``lakehouse sql --format json`` writes it."""
    from lakehouse.serving.sql import json_value

    return json.loads(json.dumps(json_value(value)))


if __name__ == "__main__":
    print(json.dumps(client(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))))
