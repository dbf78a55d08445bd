"""What a user could run instead: hand-written jobs computing the same aggregates.

The bare Spark jobs are what a competent user writes in an afternoon: read the JSON with a schema,
drop what does not parse, dedupe on ``event_id``, count and sum per 1-minute window, bridge and
vehicle type, write Delta. No quarantine, fates, exactly-once bookkeeping or audit trail: that
difference is the price of the platform the benchmarks put a number on.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

EVENT_SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.StringType()),
        T.StructField("bridge_id", T.StringType()),
        T.StructField("booth_id", T.StringType()),
        T.StructField("vehicle_type", T.StringType()),
        T.StructField("axles", T.IntegerType()),
        T.StructField("toll_amount", T.DecimalType(9, 2)),
        T.StructField("plate_hash", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("sent_at", T.TimestampType()),
    ]
)
KEYS = ("bridge_id", "vehicle_type")
REQUIRED = ("event_id", "bridge_id", "booth_id", "vehicle_type", "axles", "toll_amount", "event_time", "sent_at")
# The pipeline's value rules, written out by hand as a user would (SQL both Spark and DuckDB read).
VALUE_RULES = (
    "vehicle_type IN ('car', 'motorcycle', 'van', 'bus', 'truck')",
    "axles BETWEEN 2 AND 9",
    "toll_amount >= 0 AND toll_amount < 1000",
    "event_time <= sent_at + INTERVAL 1 DAY",
)
VALID = " AND ".join([*(f"{name} IS NOT NULL" for name in REQUIRED), *VALUE_RULES])


def _parsed(lines: DataFrame) -> DataFrame:
    events = lines.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    return events.where(VALID)


def _per_window(events: DataFrame) -> DataFrame:
    return (
        events.groupBy(F.window("event_time", "1 minute"), *KEYS)
        .agg(F.count(F.lit(1)).alias("vehicles"), F.sum("toll_amount").alias("revenue"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            *KEYS,
            "vehicles",
            "revenue",
        )
    )


# -- batch -------------------------------------------------------------------------------------------


def bare_batch_from_log(spark: SparkSession, log_glob: str, start, end, target: str) -> None:
    lines = spark.read.format("text").load(log_glob)
    events = _parsed(lines).dropDuplicates(["event_id"])
    in_range = events.where((F.col("event_time") >= F.lit(start)) & (F.col("event_time") < F.lit(end)))
    _per_window(in_range).write.format("delta").mode("overwrite").save(target)


def bare_batch_from_bronze(spark: SparkSession, bronze_uri: str, start, end, target: str) -> None:
    events = (
        spark.read.format("delta")
        .load(bronze_uri)
        .where((F.col("event_time") >= F.lit(start)) & (F.col("event_time") < F.lit(end)))
    )
    _per_window(events).write.format("delta").mode("overwrite").save(target)


def duckdb_from_log(log_glob: str, start, end, target: Path, threads: int = 2) -> int:
    """The single-machine floor: DuckDB on the same raw files, the same aggregates, into Parquet.

    Returns the number of vehicles counted (a cross-check against the Spark jobs).
    """
    import duckdb

    connection = duckdb.connect()
    connection.execute(f"SET threads = {threads}")
    columns = {
        field.name: (
            "DECIMAL(9,2)"
            if field.name == "toll_amount"
            else "TIMESTAMPTZ"
            if field.name in ("event_time", "sent_at")
            else "INTEGER"
            if field.name == "axles"
            else "VARCHAR"
        )
        for field in EVENT_SCHEMA.fields
    }
    connection.execute("SET TimeZone = 'UTC'")
    connection.execute(f"""
        COPY (
            WITH events AS (
                SELECT * FROM read_json({str(log_glob)!r}, format = 'newline_delimited', columns = {columns!r},
                                        ignore_errors = true, hive_partitioning = false)
                WHERE {VALID}
            ),
            first_copies AS (SELECT DISTINCT ON (event_id) * FROM events)
            SELECT time_bucket(INTERVAL 1 minute, event_time) AS window_start,
                   time_bucket(INTERVAL 1 minute, event_time) + INTERVAL 1 minute AS window_end,
                   bridge_id, vehicle_type, count(*) AS vehicles, sum(toll_amount) AS revenue
            FROM first_copies
            WHERE event_time >= TIMESTAMPTZ '{start.isoformat()}+00:00'
              AND event_time < TIMESTAMPTZ '{end.isoformat()}+00:00'
            GROUP BY ALL
        ) TO '{target}' (FORMAT parquet)
    """)
    return connection.execute(f"SELECT sum(vehicles) FROM read_parquet('{target}')").fetchone()[0] or 0


# -- streaming -------------------------------------------------------------------------------------


def _log_lines(spark: SparkSession, log_glob: str, max_files_per_trigger: int) -> DataFrame:
    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.load(log_glob)


def _triggered(writer, trigger: str, available_now: bool):
    """Both baselines run as the speed layer does: drain and stop, or every ``trigger``."""
    return writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=trigger)


def bare_stream(
    spark: SparkSession,
    log_glob: str,
    target: str,
    checkpoint: str,
    trigger: str,
    max_files_per_trigger: int = 0,
    available_now: bool = False,
):
    """The hand-written streaming job: same file source, same window aggregation, a Delta sink.

    ``complete`` mode: the Delta sink takes append or complete, and only complete shows a window's
    running count before the window closes, as the speed layer's table does (append would show a
    window only after the watermark passed it, minutes later). The state is the aggregate (20 rows
    per minute of event time here) plus the ids inside the watermark for the dedupe.
    """
    events = _parsed(_log_lines(spark, log_glob, max_files_per_trigger)).withWatermark("event_time", "2 minutes")
    deduped = events.dropDuplicatesWithinWatermark(["event_id"])
    writer = (
        _per_window(deduped)
        .writeStream.format("delta")
        .outputMode("complete")
        .option("checkpointLocation", checkpoint)
        .queryName("bare_stream")
    )
    return _triggered(writer, trigger, available_now).start(target)


def _merge_sums(sums: DataFrame, gold: str, app_id: str, batch_id: int) -> None:
    """Add a batch's per-window sums to the gold table, once per (app_id, batch_id)."""
    from delta.tables import DeltaTable

    spark = sums.sparkSession
    # MERGE takes no writer options: Delta reads the transaction identifiers from the session.
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        (
            DeltaTable.forPath(spark, gold)
            .alias("t")
            .merge(sums.alias("s"), " AND ".join(f"t.{c} = s.{c}" for c in ("window_start", *KEYS)))
            .whenMatchedUpdate(set={"vehicles": "t.vehicles + s.vehicles", "revenue": "t.revenue + s.revenue"})
            .whenNotMatchedInsertAll()
            .execute()
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def hand_written_speed_layer(
    spark: SparkSession,
    log_glob: str,
    warehouse: str,
    checkpoint: str,
    trigger: str,
    max_files_per_trigger: int = 0,
    available_now: bool = False,
):
    """What a user writes instead of the speed layer for the same durable work (the fair baseline).

    ``foreachBatch``: parse with a schema, keep the valid rows, dedupe within the batch, append them
    to a bronze Delta table and MERGE the batch's per-window sums into a gold Delta table (adding to
    what is there), both with ``txnAppId``/``txnVersion`` so a replayed batch is skipped. No
    watermark, no quarantine table, no panes, no dedupe across batches, no progress table.

    Args:
        spark: the session.
        log_glob: the log's files.
        warehouse: where its two tables go (``bronze``, ``gold``).
        checkpoint: the query's checkpoint.
        trigger: the processing-time trigger interval.
        max_files_per_trigger: files a micro-batch reads (0: all).
        available_now: drain what is there, then stop.
    """
    app_id, bronze, gold = "hand_written_speed_layer", f"{warehouse}/bronze", f"{warehouse}/gold"
    _per_window(_parsed(spark.createDataFrame([], "value string"))).write.format("delta").mode("ignore").save(gold)

    def write_batch(lines: DataFrame, batch_id: int) -> None:
        events = _parsed(lines).dropDuplicates(["event_id"]).persist()
        bronze_writer = events.write.format("delta").mode("append")
        bronze_writer.option("txnAppId", app_id).option("txnVersion", batch_id).save(bronze)
        _merge_sums(_per_window(events), gold, app_id, batch_id)
        events.unpersist()

    writer = (
        _log_lines(spark, log_glob, max_files_per_trigger)
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .queryName("hand_written_speed_layer")
    )
    return _triggered(writer, trigger, available_now).start()
