"""``python -m tests.connect_probes URL PROBE_DIR ELSEWHERE LAKEHOUSE_TABLE``: what an analyst's Spark
Connect client tries against the service, as a fresh client with no write token. Prints one JSON
object: for each attempt, the error it got, or "ran" when the server let it run. Each attempt that
could run code on the server would leave a file in PROBE_DIR (a directory the server can write to),
so a test checks the files as well as the answers. ELSEWHERE is a Delta table the lakehouse does not
hold, LAKEHOUSE_TABLE the location of one it does: read by path, the first is refused, the second read.

``python -m tests.connect_probes --logins URL``: logins with the users and tokens read from standard input;
``--statements URL [--parallel N]``: statements, each run by its user, from standard input, N at a time."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

SPEED = "gold.toll_traffic__speed"


def _touching(probe: Path, name: str):
    """A function that leaves ``probe/name`` behind if the server ever runs it."""

    def touch(*_):
        (probe / name).touch()
        return iter(()) if _ and hasattr(_[0], "__next__") else 0

    return touch


class _Touching:
    """A Python UDTF that leaves a file if the server runs it."""

    probe = ""

    def eval(self):
        Path(self.probe, "udtf").touch()
        yield (1,)


def attempts(spark, probe: Path, elsewhere: str) -> dict:
    """Each way a client's code could run on the server, its state change, or it read what the
    lakehouse does not hold, as a callable."""
    from pyspark.sql import functions as F

    speed = spark.table(SPEED)
    stream = spark.readStream.table(SPEED)
    checkpoint = str(probe / "checkpoint")
    _Touching.probe = str(probe)
    return {
        "python udf": lambda: speed.select(F.udf(_touching(probe, "udf"), "int")("bridge_id")).collect(),
        "udf register": lambda: spark.udf.register("touching", _touching(probe, "registered"), "int"),
        "udtf": lambda: F.udtf(_Touching, returnType="n int")().collect(),
        "mapInPandas": lambda: speed.mapInPandas(_touching(probe, "pandas"), "n int").collect(),
        "foreach": lambda: speed.foreach(_touching(probe, "foreach")),
        "stream to gold": lambda: (
            stream.writeStream.trigger(availableNow=True).option("checkpointLocation", checkpoint).toTable(SPEED)
        ),
        "stream to a path": lambda: (
            stream.writeStream.trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .format("delta")
            .start(str(probe / "out"))
        ),
        "foreachBatch": lambda: stream.writeStream.foreachBatch(_touching(probe, "batch")).start(),
        "transform using": lambda: spark.sql(
            f"SELECT TRANSFORM(bridge_id) USING 'touch {probe}/transform' AS (x) FROM {SPEED}"
        ).collect(),
        "conf readOnly": lambda: spark.conf.set("spark.lakehouse.readOnly", "false"),
        "conf unset": lambda: spark.conf.unset("spark.sql.runSQLOnFiles"),
        "cacheTable": lambda: spark.catalog.cacheTable(SPEED),
        "clearCache": lambda: spark.catalog.clearCache(),
        "persist": lambda: speed.persist().count(),
        "a text file": lambda: spark.read.text("/etc/hostname").collect(),
        "a Delta table elsewhere": lambda: spark.read.format("delta").load(elsewhere).collect(),
        "artifact": lambda: spark.addArtifacts(str(Path(__file__)), file=True),
        "checkpoint": lambda: speed.localCheckpoint().count(),
    }


def reads(spark, lakehouse_table: str) -> dict:
    """What BI tools and notebooks do when they connect, and a lakehouse table read by its location:
    each must answer."""
    catalog = spark.catalog
    return {
        "listDatabases": lambda: len(catalog.listDatabases()),
        "listTables": lambda: len(catalog.listTables("gold")),
        "listColumns": lambda: len(catalog.listColumns("gold.toll_traffic")),
        "listFunctions": lambda: len(catalog.listFunctions(pattern="abs")),
        "listCatalogs": lambda: len(catalog.listCatalogs()),
        "getTable": lambda: catalog.getTable(SPEED).name,
        "batch served from memory": lambda: _holds(catalog.isCached("gold.toll_traffic__batch")),
        "tableExists": lambda: catalog.tableExists(SPEED),
        "currentDatabase": lambda: catalog.currentDatabase(),
        "setCurrentDatabase": lambda: catalog.setCurrentDatabase("gold"),
        "timeZone": lambda: spark.conf.set("spark.sql.session.timeZone", "UTC"),
        "schema": lambda: len(spark.table("gold.toll_traffic").schema),
        "explain": lambda: spark.table("gold.toll_traffic").explain(),
        "a table by its location": lambda: spark.read.format("delta").load(lakehouse_table).count(),
        **{
            statement: (lambda s=statement: len(spark.sql(s).collect()))
            for statement in (
                "SHOW DATABASES",
                "SHOW CATALOGS",
                "SHOW CURRENT NAMESPACE",
                "SHOW COLUMNS IN gold.toll_traffic__speed",
                "SHOW TABLE EXTENDED IN gold LIKE 'toll_traffic*'",
                "DESCRIBE TABLE EXTENDED gold.toll_traffic",
                "DESCRIBE QUERY SELECT * FROM gold.toll_traffic",
                "DESCRIBE HISTORY gold.toll_traffic__speed",
                "DESCRIBE DETAIL gold.toll_traffic__speed",
            )
        },
    }


def _holds(fact: bool) -> None:
    if not fact:
        raise AssertionError("not so")


def outcome(attempt) -> str:
    try:
        attempt()
    except Exception as error:  # what the client was told, on one line
        return " ".join(str(error).split())
    return "ran"


def logins(url: str, attempts: dict[str, list]) -> dict[str, str]:
    """Each attempt (a user name and a token, or none) reads a table as a fresh client: what it was told."""
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    def read(user: str, token: str | None):
        channel = DefaultChannelBuilder(url)
        channel.set(DefaultChannelBuilder.PARAM_USER_ID, user)
        if token is not None:
            channel.set(DefaultChannelBuilder.PARAM_TOKEN, token)
        return ConnectSession.builder.channelBuilder(channel).create().sql(f"SELECT count(*) FROM {SPEED}").collect()

    return {name: outcome(lambda attempt=attempt: read(*attempt)) for name, attempt in attempts.items()}


def statements(url: str, runs: list[list], parallel: int = 1) -> list[dict]:
    """Each statement run by its user (a name and a token), in order, or ``parallel`` at a time: its
    rows, or the error it got, in the order given. A user and token share one session."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    sessions, opening = {}, threading.Lock()

    def session(user: str, token: str):
        with opening:
            if (user, token) not in sessions:
                channel = DefaultChannelBuilder(url)
                channel.set(DefaultChannelBuilder.PARAM_USER_ID, user)
                channel.set(DefaultChannelBuilder.PARAM_TOKEN, token)
                sessions[user, token] = ConnectSession.builder.channelBuilder(channel).create()
            return sessions[user, token]

    def run(user: str, token: str, statement: str) -> dict:
        answer = {}
        said = outcome(lambda: answer.update(rows=_rows(session(user, token).sql(statement).collect())))
        return answer if said == "ran" else {"error": said}

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(lambda each: run(*each), runs))


def _rows(rows) -> list[dict]:
    return [json.loads(json.dumps(row.asDict(), default=str)) for row in rows]


def main() -> None:
    from pyspark.sql import SparkSession

    # The attempts or statements on standard input: tokens in no command line.
    if sys.argv[1] == "--logins":
        print(json.dumps(logins(sys.argv[2], json.load(sys.stdin))))
        return
    if sys.argv[1] == "--statements":
        parallel = int(sys.argv[4]) if sys.argv[3:4] == ["--parallel"] else 1
        print(json.dumps(statements(sys.argv[2], json.load(sys.stdin), parallel)))
        return
    url, probe, elsewhere, lakehouse_table = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    spark = SparkSession.builder.remote(url).getOrCreate()
    tried = {name: outcome(attempt) for name, attempt in attempts(spark, probe, elsewhere).items()}
    answered = {name: outcome(read) for name, read in reads(spark, lakehouse_table).items()}
    print(json.dumps({"attempts": tried, "reads": answered}))


if __name__ == "__main__":
    main()
