"""SQL output formats (plain Python) and ``run_sql`` over a tiny Delta table (the shared session)."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.location import local_path
from lakehouse.serving.sql import format_rows, run_sql
from lakehouse.settings import Settings
from lakehouse.storage.catalog import STREAM_PROGRESS, ensure_table
from tests.frames import inline_frame

COLUMNS = ["bridge_id", "vehicles", "revenue"]
ROWS = [("bridge-00", 12, Decimal("1234.50")), ("bridge-01", None, Decimal("0.30"))]


# --- format_rows: table ----------------------------------------------------------------------------


def test_table_left_aligns_text_right_aligns_numbers_and_counts_the_rows():
    assert format_rows(COLUMNS, ROWS, "table") == (
        "bridge_id | vehicles | revenue\n"
        "----------+----------+--------\n"
        "bridge-00 |       12 | 1234.50\n"
        "bridge-01 |     NULL |    0.30\n"
        "(2 rows)\n"
    )


def test_table_shows_null_as_the_word_null():
    assert format_rows(["plate_hash"], [("9f86d081",), (None,)], "table").splitlines()[3] == "NULL"


def test_table_counts_a_single_row_in_the_singular():
    assert format_rows(["n"], [(1,)], "table").endswith("\n(1 row)\n")


def test_table_notes_that_more_rows_were_not_shown_when_truncated():
    assert format_rows(COLUMNS, ROWS, "table", truncated=True).endswith("\n(2 rows, more not shown)\n")


def test_table_of_no_rows_shows_the_header_and_a_zero_count():
    assert format_rows(["window_start", "vehicles"], [], "table") == (
        "window_start | vehicles\n-------------+---------\n(0 rows)\n"
    )


def test_table_shows_timestamps_with_a_space_between_date_and_time():
    assert format_rows(["window_start"], [(datetime(2026, 1, 5, 8, 1),)], "table").splitlines()[2] == (
        "2026-01-05 08:01:00"
    )


# --- format_rows: csv ------------------------------------------------------------------------------


def test_csv_writes_a_header_and_leaves_null_cells_empty():
    assert format_rows(COLUMNS, ROWS, "csv") == "bridge_id,vehicles,revenue\nbridge-00,12,1234.50\nbridge-01,,0.30\n"


def test_csv_quotes_a_value_holding_a_comma():
    assert format_rows(["raw"], [('{"a":1,"b":2}',)], "csv") == 'raw\n"{""a"":1,""b"":2}"\n'


def test_csv_writes_timestamps_as_in_the_table():
    assert (
        format_rows(["window_start"], [(datetime(2026, 1, 5, 8, 1),)], "csv") == "window_start\n2026-01-05 08:01:00\n"
    )


# --- format_rows: json -----------------------------------------------------------------------------


def test_json_writes_decimals_as_exact_strings():
    assert json.loads(format_rows(["revenue"], [(Decimal("0.30"),), (Decimal("1234567890123456.10"),)], "json")) == [
        {"revenue": "0.30"},
        {"revenue": "1234567890123456.10"},
    ]


def test_json_writes_null_as_null_and_keeps_integers_as_numbers():
    assert json.loads(format_rows(COLUMNS, ROWS, "json"))[1] == {
        "bridge_id": "bridge-01",
        "vehicles": None,
        "revenue": "0.30",
    }


def test_json_writes_timestamps_and_dates_in_iso_format():
    out = format_rows(
        ["window_start", "event_date"], [(datetime(2026, 1, 5, 8, 1, 0, 250000), date(2026, 1, 5))], "json"
    )
    assert json.loads(out) == [{"window_start": "2026-01-05T08:01:00.250000", "event_date": "2026-01-05"}]


def test_json_of_no_rows_is_an_empty_array():
    assert json.loads(format_rows(COLUMNS, [], "json")) == []


# --- run_sql ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def progress_home(spark, tmp_path_factory) -> Settings:
    """ops.stream_progress with 0 rows at version 0 (creation), 1 row at version 1, 3 rows at version 2."""
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path_factory.mktemp("sql-home"))})
    ensure_table(STREAM_PROGRESS, settings)
    started = datetime(2026, 1, 5, 8, 0)
    batch = [
        ("toll_traffic", "app-1", n, started, 100, 10, 0, 0, 10, 0, None, started, 2, [f"file-{n}.jsonl"], None)
        for n in range(3)
    ]
    for rows in (batch[:1], batch[1:]):
        inline_frame(spark, STREAM_PROGRESS.columns, rows).write.format("delta").mode("append").save(
            STREAM_PROGRESS.uri(settings)
        )
    return settings


def test_run_sql_reads_a_lakehouse_table_by_its_qualified_name(spark, progress_home):
    out = run_sql(spark, progress_home, "SELECT count(*) AS n FROM ops.stream_progress", "json")
    assert json.loads(out) == [{"n": 3}]


def test_version_as_of_reads_the_table_as_it_was(spark, progress_home):
    out = run_sql(spark, progress_home, "SELECT count(*) AS n FROM ops.stream_progress VERSION AS OF 1", "json")
    assert json.loads(out) == [{"n": 1}]


def test_run_sql_shows_at_most_max_rows_and_says_more_exist(spark, progress_home):
    out = run_sql(
        spark, progress_home, "SELECT batch_id FROM ops.stream_progress ORDER BY batch_id", "table", max_rows=2
    )
    assert out == "batch_id\n--------\n       0\n       1\n(2 rows, more not shown)\n"


def test_a_query_that_does_not_parse_is_a_one_line_sql_error(spark, progress_home):
    with pytest.raises(LakehouseError) as error:
        run_sql(spark, progress_home, "SELEC count(*) FROM ops.stream_progress")
    assert str(error.value).startswith("SQL error: [PARSE_SYNTAX_ERROR]")
    assert "\n" not in str(error.value)


def test_a_query_on_an_unknown_table_is_an_sql_error_naming_it(spark, progress_home):
    with pytest.raises(LakehouseError, match=r"^SQL error: \[TABLE_OR_VIEW_NOT_FOUND\] .*`ops`\.`no_such_table`"):
        run_sql(spark, progress_home, "SELECT * FROM ops.no_such_table")


def test_an_unknown_output_format_is_refused(spark, progress_home):
    with pytest.raises(LakehouseError, match=r"^unknown format 'xml': use one of table, csv, json$"):
        run_sql(spark, progress_home, "SELECT 1", "xml")


# --- read-only -------------------------------------------------------------------------------------

CHANGES = {
    "INSERT": "INSERT INTO ops.stream_progress SELECT * FROM ops.stream_progress",
    "INSERT OVERWRITE": "INSERT OVERWRITE ops.stream_progress SELECT * FROM ops.stream_progress",
    "UPDATE": "UPDATE ops.stream_progress SET input_rows = input_rows + 1",
    "DELETE": "DELETE FROM ops.stream_progress WHERE batch_id = 0",
    "MERGE": "MERGE INTO ops.stream_progress t USING ops.stream_progress s ON t.batch_id = s.batch_id "
    "WHEN MATCHED THEN UPDATE SET input_rows = 0",
    "CTE then INSERT": "WITH s AS (SELECT * FROM ops.stream_progress) INSERT INTO ops.stream_progress SELECT * FROM s",
    "DROP": "DROP TABLE ops.stream_progress",
    "ALTER": "ALTER TABLE ops.stream_progress ADD COLUMNS (note STRING)",
    "CREATE": "CREATE TABLE ops.copy USING delta AS SELECT * FROM ops.stream_progress",
    "CREATE VIEW": "CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1",
    "TRUNCATE": "TRUNCATE TABLE ops.stream_progress",
    "OPTIMIZE": "OPTIMIZE ops.stream_progress",
    "VACUUM": "VACUUM ops.stream_progress RETAIN 0 HOURS",
    "RESTORE": "RESTORE TABLE ops.stream_progress TO VERSION AS OF 0",
    "SET": "SET spark.sql.ansi.enabled = false",
    "CACHE": "CACHE TABLE ops.stream_progress",
    "reflect": "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
    "java_method in a subquery": "SELECT * FROM ops.stream_progress "
    "WHERE batch_id IN (SELECT java_method('java.lang.Math', 'abs', batch_id) FROM ops.stream_progress)",
    "try_reflect": "SELECT try_reflect('java.lang.System', 'getProperty', 'user.home')",
    "TRANSFORM USING": "SELECT TRANSFORM(pipeline) USING 'cat' AS (x) FROM ops.stream_progress",
    "TRANSFORM in a subquery": "SELECT * FROM ops.stream_progress WHERE pipeline IN "
    "(SELECT TRANSFORM(pipeline) USING 'cat' AS (x) FROM ops.stream_progress)",
    "a text file": "SELECT * FROM text.`/etc/hostname`",
    "CREATE FUNCTION": "CREATE TEMPORARY FUNCTION f AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
    "ADD JAR": "ADD JAR /tmp/no-such.jar",
    "ADD FILE": "ADD FILE /etc/hostname",
    "ADD ARCHIVE": "ADD ARCHIVE /tmp/no-such.zip",
    "UNCACHE": "UNCACHE TABLE ops.stream_progress",
    "CLEAR CACHE": "CLEAR CACHE",
    "DECLARE": "DECLARE VARIABLE v INT",
    "EXECUTE IMMEDIATE of a DELETE": "EXECUTE IMMEDIATE 'DELETE FROM ops.stream_progress'",
}


@pytest.mark.parametrize("statement", CHANGES.values(), ids=CHANGES.keys())
def test_a_statement_that_changes_anything_is_refused_in_one_line_and_changes_nothing(spark, progress_home, statement):
    from lakehouse.storage.catalog import table_version

    uri = STREAM_PROGRESS.uri(progress_home)
    version = table_version(spark, uri)

    with pytest.raises(LakehouseError, match=r"^read-only: ") as error:
        run_sql(spark, progress_home, statement)

    assert "\n" not in str(error.value)
    assert table_version(spark, uri) == version
    assert json.loads(run_sql(spark, progress_home, "SELECT count(*) AS n FROM ops.stream_progress", "json")) == [
        {"n": 3}
    ]


def test_a_restore_to_the_current_version_is_nothing_to_delta_and_changes_nothing(spark, progress_home):
    from lakehouse.storage.catalog import table_version

    uri = STREAM_PROGRESS.uri(progress_home)
    version = table_version(spark, uri)

    run_sql(spark, progress_home, f"RESTORE TABLE ops.stream_progress TO VERSION AS OF {version}")

    assert table_version(spark, uri) == version


READS = {
    "SHOW TABLES": ("SHOW TABLES IN ops", "stream_progress"),
    "DESCRIBE": ("DESCRIBE ops.stream_progress", "input_rows"),
    "DESCRIBE HISTORY": ("DESCRIBE HISTORY ops.stream_progress", "WRITE"),
    "DESCRIBE DETAIL": ("DESCRIBE DETAIL ops.stream_progress", "delta"),
    "EXPLAIN of a DELETE": ("EXPLAIN DELETE FROM ops.stream_progress", "Delete"),
    "USE": ("USE ops", ""),
    "CTE": ("WITH p AS (SELECT batch_id FROM ops.stream_progress) SELECT max(batch_id) AS b FROM p", "2"),
    # What BI tools and notebooks ask when they connect.
    "SHOW DATABASES": ("SHOW DATABASES", "ops"),
    "SHOW SCHEMAS": ("SHOW SCHEMAS LIKE 'o*'", "ops"),
    "SHOW CATALOGS": ("SHOW CATALOGS", "spark_catalog"),
    "SHOW CURRENT NAMESPACE": ("SHOW CURRENT NAMESPACE", "spark_catalog"),
    "SHOW COLUMNS": ("SHOW COLUMNS IN ops.stream_progress", "input_rows"),
    "SHOW TABLE EXTENDED": ("SHOW TABLE EXTENDED IN ops LIKE 'stream*'", "stream_progress"),
    "SHOW VIEWS": ("SHOW VIEWS IN ops", "namespace"),
    "SHOW TBLPROPERTIES": ("SHOW TBLPROPERTIES ops.stream_progress", "delta.minReaderVersion"),
    "SHOW FUNCTIONS": ("SHOW FUNCTIONS LIKE 'abs'", "abs"),
    "DESCRIBE SCHEMA": ("DESCRIBE SCHEMA EXTENDED ops", "ops"),
    "DESCRIBE TABLE EXTENDED": ("DESCRIBE TABLE EXTENDED ops.stream_progress", "Location"),
    "DESCRIBE a column": ("DESCRIBE ops.stream_progress batch_id", "bigint"),
    "DESCRIBE FUNCTION": ("DESCRIBE FUNCTION EXTENDED abs", "abs"),
    "DESCRIBE QUERY": ("DESCRIBE QUERY SELECT batch_id FROM ops.stream_progress", "batch_id"),
    "pipe syntax": ("FROM ops.stream_progress |> WHERE batch_id = 2 |> SELECT batch_id", "2"),
    "higher-order function": ("SELECT transform(array(1, 2), x -> x + 1) AS a", "3"),
}


@pytest.mark.parametrize(("statement", "shown"), READS.values(), ids=READS.keys())
def test_statements_that_only_read_or_describe_run(spark, progress_home, statement, shown):
    assert shown in run_sql(spark, progress_home, statement, "csv")


def test_the_cli_answers_a_change_with_a_one_line_error_and_exit_code_2(spark, progress_home, monkeypatch, capsys):
    from lakehouse import cli
    from lakehouse.commands import reading

    monkeypatch.setenv("LAKEHOUSE_HOME", str(local_path(progress_home.home)))
    monkeypatch.setattr(reading, "spark_session", lambda settings, app: spark)  # the shared session, not a new JVM

    code = cli.main(["sql", "UPDATE ops.stream_progress SET input_rows = input_rows + 1"])

    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("lakehouse: error: read-only: ") and error.count("\n") == 1


def _python_udf(spark):
    from pyspark.sql import functions as F

    return spark.range(1).select(F.udf(lambda n: n, "long")("id"))


DATAFRAME_CODE = {
    "a Python UDF": (_python_udf, "PythonUDF runs a client's function"),
    "mapInPandas": (lambda spark: spark.range(1).mapInPandas(lambda it: it, "id long"), "MapInPandas runs"),
    "mapInArrow": (lambda spark: spark.range(1).mapInArrow(lambda it: it, "id long"), "MapInArrow runs"),
    "applyInPandas": (
        lambda spark: spark.range(1).groupBy("id").applyInPandas(lambda frame: frame, "id long"),
        "FlatMapGroupsInPandas runs",
    ),
    "a streaming source": (lambda spark: spark.readStream.format("rate").load(), "a streaming query"),
}


@pytest.mark.parametrize(("build", "named"), DATAFRAME_CODE.values(), ids=DATAFRAME_CODE.keys())
def test_a_read_only_session_refuses_a_plan_that_runs_client_code(spark, progress_home, build, named):
    from lakehouse.serving.read_only import reading_only

    with reading_only(spark), pytest.raises(Exception, match=f"read-only: {named}"):
        build(spark).collect()


# --- read-only: which tables, and which settings ---------------------------------------------------


@pytest.fixture(scope="module")
def elsewhere(spark, tmp_path_factory) -> str:
    """A Delta table, with its change feed, that the session's user can read and no catalog holds."""
    path = str(tmp_path_factory.mktemp("not-the-lakehouse") / "table")
    spark.range(3).write.format("delta").option("delta.enableChangeDataFeed", "true").save(path)
    return path


READS_BY_PATH = {
    "SQL on files": "SELECT * FROM delta.`{path}`",
    "an older version": "SELECT * FROM delta.`{path}` VERSION AS OF 0",
    "the change feed": "SELECT * FROM table_changes_by_path('{path}', 0)",
    "DESCRIBE HISTORY": "DESCRIBE HISTORY '{path}'",
    "DESCRIBE DETAIL": "DESCRIBE DETAIL '{path}'",
    "SHOW COLUMNS": "SHOW COLUMNS IN delta.`{path}`",
    "DESCRIBE QUERY": "DESCRIBE QUERY SELECT * FROM delta.`{path}`",
}


@pytest.mark.parametrize("statement", READS_BY_PATH.values(), ids=READS_BY_PATH.keys())
def test_a_delta_table_the_lakehouse_does_not_hold_is_refused_by_its_path(spark, progress_home, elsewhere, statement):
    with pytest.raises(LakehouseError, match=r"^read-only: file:.* is not the location of a table of the lakehouse"):
        run_sql(spark, progress_home, statement.format(path=elsewhere))


def test_a_dataframe_read_of_a_path_the_lakehouse_does_not_hold_is_refused(spark, progress_home, elsewhere):
    from lakehouse.serving.read_only import reading_only

    with reading_only(spark), pytest.raises(Exception, match="read-only: file:.* is not the location of a table"):
        spark.read.format("delta").load(elsewhere).collect()


@pytest.mark.parametrize(
    ("statement", "shown"),
    [("SELECT count(*) AS n FROM delta.`{path}` VERSION AS OF 1", "1"), ("DESCRIBE HISTORY '{path}'", "WRITE")],
)
def test_a_lakehouse_table_is_read_by_its_location_too(spark, progress_home, statement, shown):
    path = STREAM_PROGRESS.uri(progress_home)
    assert shown in run_sql(spark, progress_home, statement.format(path=path), "csv").splitlines()[1]


OPEN_REQUESTS = {
    # What the Hive JDBC driver sends for jdbc:hive2://host:port/gold?spark.sql.session.timeZone=UTC
    "a settable conf": (
        {
            "use:database": "gold",
            "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000",
            "set:hiveconf:spark.sql.session.timeZone": "UTC",
        },
        None,
    ),
    "a catalog plugin": (
        {"set:hiveconf:spark.sql.catalog.evil": "org.apache.spark.sql.delta.catalog.DeltaCatalog"},
        "setting spark.sql.catalog.evil is not allowed",
    ),
    "a hive variable": ({"set:hivevar:spark.sql.runSQLOnFiles": "true"}, "setting spark.sql.runSQLOnFiles"),
    "a JVM property": ({"set:system:user.dir": "/"}, "setting set:system:user.dir is not allowed"),
}


@pytest.mark.parametrize(("settings", "refused"), OPEN_REQUESTS.values(), ids=OPEN_REQUESTS.keys())
def test_a_thrift_session_opens_only_with_settings_a_read_only_session_may_set(spark, settings, refused):
    reason = spark._jvm.lakehouse.serving.ReadOnlyConfs.openRefusal(settings)

    assert (reason or "").startswith(refused or "") and (reason is None) == (refused is None), reason
