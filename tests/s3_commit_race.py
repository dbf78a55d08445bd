"""Two Spark drivers, two processes, committing to one s3a:// Delta table at once (docs/operations.md,
"Object storage"; tests/test_s3_commits.py, and `make chaos` for 100 rounds).

Each driver appends one row per round, ``rounds`` times, as an idempotent Delta write (its
``txnAppId`` is the driver's name, its ``txnVersion`` the round): the table's log then says which
driver's round each commit holds. A round starts when both drivers have reached it (a barrier of
marker files), so that their commits race. Afterwards a commit is lost when a round's row is
missing from the table, or its transaction from every commit file of the log (its file was
overwritten by the other driver's).

``python -m tests.s3_commit_race WRITER TABLE_URI BARRIER_DIR ROUNDS``: one driver, its settings from
the environment (LAKEHOUSE_S3_*); prints one JSON line, its rounds and seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lakehouse.location import Location

WRITERS = ("a", "b")
# The writer of this name commits through delta-rs (conditional writes) instead of Spark.
DELTA_RS = "rs"
BARRIER_SECONDS = 120


def barrier(folder: Path, writer: str, round_number: int, writers: tuple[str, ...]) -> None:
    """Wait until every writer has reached ``round_number``."""
    (folder / f"{writer}-{round_number}").touch()
    deadline = time.monotonic() + BARRIER_SECONDS
    while not all((folder / f"{other}-{round_number}").exists() for other in writers):
        if time.monotonic() > deadline:
            raise SystemExit(f"writer {writer}: another writer did not reach round {round_number}")
        time.sleep(0.01)


def drive(writer: str, table_uri: str, folder: Path, rounds: int, writers: tuple[str, ...]) -> dict:
    """One driver's rounds: an append of one row each, once every driver is at the round.

    Args:
        writer: its name (DELTA_RS: through delta-rs, else through a Spark session of its own).
        table_uri: the s3a:// table.
        folder: the barrier's marker files.
        rounds: how many appends.
        writers: every writer of the race.
    """
    from lakehouse.settings import Settings

    append = delta_rs_append if writer == DELTA_RS else spark_append(writer)
    started = time.monotonic()
    for round_number in range(rounds):
        barrier(folder, writer, round_number, writers)
        append(Settings.from_env(), table_uri, writer, round_number)
    return {"writer": writer, "rounds": rounds, "seconds": round(time.monotonic() - started, 1)}


def spark_append(writer: str):
    """An append through a Spark session started now, idempotent as the writer's round."""
    from lakehouse.settings import Settings
    from lakehouse.storage.spark import build_spark_session

    spark = build_spark_session(Settings.from_env(), f"commit-race-{writer}")

    def append(settings, table_uri: str, name: str, round_number: int) -> None:
        row = spark.createDataFrame([(name, round_number)], "writer string, round int")
        txn = {"txnAppId": name, "txnVersion": round_number}
        row.write.format("delta").mode("append").options(**txn).save(table_uri)

    return append


def delta_rs_append(settings, table_uri: str, name: str, round_number: int) -> None:
    """An append through delta-rs, the commit an S3 conditional write, idempotent as the round."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from lakehouse.storage.ops_tables import delta_rs_location

    location, options = delta_rs_location(table_uri, settings, writes=True)
    rows = pa.table({"writer": [name], "round": pa.array([round_number], pa.int32())})
    done = CommitProperties(app_transactions=[Transaction(name, round_number)])
    write_deltalake(location, rows, mode="append", storage_options=options, commit_properties=done)


def race(table_uri: str, folder: Path, rounds: int, env: dict[str, str], writers=WRITERS) -> list[dict]:
    """The drivers at once, each its own process; their reports once all have ended.

    Args:
        table_uri: the s3a:// table both append to.
        folder: where the barrier's marker files go (empty, local).
        rounds: how many rows each driver appends, one commit each.
        env: the drivers' environment (the settings' variables).
        writers: the drivers' names (DELTA_RS: one through delta-rs).
    """
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.s3_commit_race"]
    # Each driver's standard error to a file of its own (a pipe read only at the end could fill and
    # stall a driver at the barrier); its report names the file.
    errors = {w: folder / f"{w}.stderr" for w in writers}
    drivers = []
    for w in writers:
        with errors[w].open("w") as error:
            command_line = [*command, w, table_uri, str(folder), str(rounds), ",".join(writers)]
            drivers.append(subprocess.Popen(command_line, env=env, stdout=subprocess.PIPE, stderr=error, text=True))
    try:
        # A round's append takes seconds; a JVM's start on a loaded machine (three test workers on two
        # cores) has taken over a minute, which the barrier waits out.
        outputs = [driver.communicate(timeout=BARRIER_SECONDS + rounds * 60)[0] for driver in drivers]
    except subprocess.TimeoutExpired:
        for driver in drivers:
            driver.kill()
        tails = {w: errors[w].read_text()[-3000:] for w in writers}
        raise AssertionError(f"the race did not end; each driver's standard error ends: {tails}") from None
    failed = [w for w, driver in zip(writers, drivers, strict=True) if driver.returncode != 0]
    if failed:
        raise AssertionError(
            f"driver(s) {failed} failed; their output: {outputs}; {[errors[w].read_text()[-3000:] for w in failed]}"
        )
    reports = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    return [{**report, "stderr": str(errors[w])} for w, report in zip(writers, reports, strict=True)]


def committed_transactions(s3, table_uri: str) -> dict[str, int]:
    """The commit files of the table's log, read from S3: the transaction each holds
    (``writer/round``), and how many commit files there are."""
    location = Location.parse(table_uri)
    prefix = f"{location.key}/_delta_log/"
    held, files = set(), 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            name = item["Key"][len(prefix) :]
            if not (name.endswith(".json") and name[:-5].isdigit()):
                continue
            files += 1
            body = s3.get_object(Bucket=location.bucket, Key=item["Key"])["Body"].read().decode()
            for line in body.splitlines():
                action = json.loads(line)
                if "txn" in action:
                    held.add(f"{action['txn']['appId']}/{action['txn']['version']}")
    return {"transactions": held, "commit_files": files}


def lost_commits(spark, s3, table_uri: str, rounds: int, writers=WRITERS) -> dict:
    """What the drivers committed and the table lacks: rows missing from the table, and
    transactions missing from its log's commit files."""
    expected = {f"{writer}/{n}" for writer in writers for n in range(rounds)}
    rows = {f"{row.writer}/{row.round}" for row in spark.read.format("delta").load(table_uri).collect()}
    log = committed_transactions(s3, table_uri)
    return {
        "commits": len(expected),
        "rows_missing": sorted(expected - rows),
        "commits_missing": sorted(expected - log["transactions"]),
        "commit_files": log["commit_files"],
    }


def claims(env: dict[str, str], table_uri: str) -> int:
    """How many commits of the table the DynamoDB commit table holds claims for."""
    import boto3

    ddb = boto3.client(
        "dynamodb",
        endpoint_url=env["LAKEHOUSE_S3_COMMIT_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    pages = ddb.get_paginator("query").paginate(
        TableName=env["LAKEHOUSE_S3_COMMIT_TABLE"],
        KeyConditionExpression="tablePath = :path",
        ExpressionAttributeValues={":path": {"S": table_uri}},
        Select="COUNT",
    )
    return sum(page["Count"] for page in pages)


def table_of(folder: Path) -> str:
    """The race's table, named after its folder."""
    return f"s3a://commit-race/{folder.name}/t"


def measured(spark, env: dict[str, str], folder: Path, rounds: int, writers=WRITERS) -> dict:
    """One race of ``rounds`` rounds on a new table, with the log store ``env`` chooses; its figures.

    Args:
        spark: a session that creates and then reads the table (its own log store alike).
        env: the drivers' environment: the S3 and commit settings.
        folder: an empty local folder of the race's own.
        rounds: commits per driver.
        writers: the drivers' names (DELTA_RS: one through delta-rs).
    """
    from lakehouse.settings import Settings
    from lakehouse.storage import object_store

    table = table_of(folder)
    s3 = object_store.client(Settings.from_env(env))
    object_store.ensure_bucket(s3, "commit-race")
    spark.createDataFrame([], "writer string, round int").write.format("delta").save(table)
    reports = race(table, folder / "barrier", rounds, env, writers)
    return {**lost_commits(spark, s3, table, rounds, writers), "drivers": reports}


def main() -> None:
    """`make chaos`: the races of COMMIT_RACE_ROUNDS rounds (default 100) through each log store
    (COMMIT_RACES: a comma-separated subset of RACES' labels); figures in test-artifacts/s3_commits.json.
    Fails when a race other than the UNSAFE ones lost a commit."""
    import contextlib
    import os
    import tempfile

    from lakehouse.storage.spark import build_spark_session
    from tests.conftest import make_settings
    from tests.services import object_store_services

    rounds = int(os.environ.get("COMMIT_RACE_ROUNDS", "100"))
    figures = {}
    with tempfile.TemporaryDirectory(prefix="commit-race-") as root, object_store_services(Path(root)) as env:
        spark = build_spark_session(make_settings(Path(root) / "reader", **env), "commit-race-reader")
        only = os.environ.get("COMMIT_RACES")
        for label, commits, writers in [race for race in RACES if not only or race[0] in only.split(",")]:
            drivers_env = {
                **os.environ,
                **env,
                **commits,
                "LAKEHOUSE_HOME": f"{root}/{label}",
                "LAKEHOUSE_SPARK_MASTER": "local[1]",
            }
            result = measured(spark, drivers_env, Path(root) / label, rounds, writers)
            figures[label] = {**result, "lost": len(set(result["rows_missing"]) | set(result["commits_missing"]))}
            if commits is DYNAMODB and writers == WRITERS:  # every Spark commit claimed in DynamoDB
                figures[label]["unclaimed"] = len(writers) * rounds - claims(drivers_env, table_of(Path(root) / label))
            print(label, json.dumps({k: v for k, v in figures[label].items() if k != "drivers"}), flush=True)
        with contextlib.suppress(Exception):
            spark.stop()
    Path("test-artifacts").mkdir(exist_ok=True)
    Path("test-artifacts/s3_commits.json").write_text(json.dumps(figures, indent=1))
    lost = {label: figure["lost"] for label, figure in figures.items() if label not in UNSAFE and figure["lost"]}
    if lost:
        raise SystemExit(f"commits lost through a log store meant to keep them: {lost}")
    unclaimed = {label: figure["unclaimed"] for label, figure in figures.items() if figure.get("unclaimed")}
    if unclaimed:
        raise SystemExit(f"commits that skipped the DynamoDB table: {unclaimed}")


# make chaos's races: two Spark drivers through each log store, then Spark against delta-rs.
SINGLE_DRIVER = {"LAKEHOUSE_S3_COMMITS": "single-driver"}
CONDITIONAL = {"LAKEHOUSE_S3_COMMITS": "conditional"}
DYNAMODB = {"LAKEHOUSE_S3_COMMITS": "dynamodb"}
RACES = (
    ("single-driver", SINGLE_DRIVER, WRITERS),
    ("conditional", CONDITIONAL, WRITERS),
    ("conditional-vs-delta-rs", CONDITIONAL, ("a", DELTA_RS)),
    ("dynamodb", DYNAMODB, WRITERS),
    ("dynamodb-vs-delta-rs", DYNAMODB, ("a", DELTA_RS)),
)
# The races whose log stores promise nothing: their losses are figures, not failures.
UNSAFE = {"single-driver", "dynamodb-vs-delta-rs"}

if __name__ == "__main__":
    if len(sys.argv) == 1:
        main()
    else:
        name, uri, barrier_dir, count, names = sys.argv[1:6]
        print(json.dumps(drive(name, uri, Path(barrier_dir), int(count), tuple(names.split(",")))), flush=True)
