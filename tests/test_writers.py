"""The idempotent Delta writes and the layout of the gold tables they write, on real Delta tables."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers.batch import chunk_predicate, chunk_replacement
from lakehouse.layers.speed import merge_bound
from lakehouse.location import local_path
from lakehouse.storage.catalog import BY_WINDOW_DATE, ensure_table, pipeline_tables
from lakehouse.storage.writers import append_stamped_once, replace_rows, replace_where, upsert_once
from tests.conftest import make_settings
from tests.frames import inline_frame

PIPELINE = get_pipeline("team_scores")
TABLES = pipeline_tables(PIPELINE)
GOLD = "window_start timestamp, window_end timestamp, team string, total_score long"
PANES = GOLD + ", is_retraction boolean"
DAY = datetime(2026, 1, 5)
SPEED_COLUMNS = ["window_start", "window_end", "team", "total_score", "window_hour"]
# A speed table as the catalog created it before it was partitioned by the window's hour.
BY_DATE = dataclasses.replace(TABLES.speed, **BY_WINDOW_DATE)


def hour(h: int) -> datetime:
    return DAY + timedelta(hours=h)


def _speed_table(spark, home, hours: range, minutes: int = 60) -> str:
    """``gold.team_scores__speed`` holding two teams' windows of ``minutes`` from each hour of
    ``hours`` to the next, as the catalog creates it."""
    settings = make_settings(home)
    ensure_table(TABLES.speed, settings)
    uri = TABLES.speed.uri(settings)
    starts = [hour(h) + timedelta(minutes=m) for h in hours for m in range(0, 60, minutes)]
    rows = [
        (start, start + timedelta(minutes=minutes), team, 10 * start.hour)
        for start in starts
        for team in ("red", "blue")
    ]
    inline_frame(spark, GOLD, rows).write.format("delta").mode("append").save(uri)
    return uri


def _upsert(panes, uri: str, version: int, bounded: bool = True) -> dict:
    """Upsert ``panes`` (a Spark frame, handed over as Arrow as the speed layer does); returns the
    metrics of the table's last commit."""
    from deltalake import DeltaTable

    rows = panes.toArrow()
    upsert_once(
        rows,
        uri,
        match_columns=["window_start", "window_end", "team"],
        value_columns=["total_score"],
        delete_when="is_retraction",
        transaction=("writer-test", version),
        target_rows=functools.partial(merge_bound, rows) if bounded else None,
    )
    return DeltaTable(uri.removeprefix("file:")).history(1)[0].get("operationMetrics", {})


def _speed_rows(spark, uri: str):
    return spark.read.format("delta").load(uri).select(*SPEED_COLUMNS)


def test_an_upsert_bounded_by_its_rows_hours_sets_the_same_rows_as_an_unbounded_one(spark, tmp_path):
    # An old window and new ones; teams updated, added and retracted.
    panes = inline_frame(
        spark,
        PANES,
        [
            (hour(0), hour(1), "red", 1, False),  # update of the oldest window
            (hour(5), hour(6), "blue", None, True),  # retraction
            (hour(5), hour(6), "green", 7, False),  # a new team in a known window
            (hour(30), hour(31), "red", 8, False),  # a new window on the next day
        ],
    )
    tables = {}
    for bounded in (False, True):
        uri = _speed_table(spark, tmp_path / f"bounded={bounded}", range(6))
        _upsert(panes, uri, version=1, bounded=bounded)
        tables[bounded] = _speed_rows(spark, uri)

    assertDataFrameEqual(tables[True], tables[False])
    assert tables[True].count() == 6 * 2 - 1 + 2
    assert tables[True].where(F.col("window_hour") != F.date_trunc("HOUR", "window_start")).count() == 0


def test_a_micro_batch_upsert_rewrites_only_the_hours_of_the_windows_it_changes(spark, tmp_path):
    # Four hours of 20-minute windows held; the stream updates the newest and opens the next
    # hour's first. By date, this MERGE copied every other row of the day (23), batch after batch.
    uri = _speed_table(spark, tmp_path, range(4), minutes=20)
    panes = [
        (hour(3) + timedelta(minutes=40), hour(4), "red", 99, False),
        (hour(4), hour(4) + timedelta(minutes=20), "red", 5, False),
    ]

    metrics = _upsert(inline_frame(spark, PANES, panes), uri, version=1)

    # Hour 3's file alone: its five other rows copied, one updated; hour 4's row inserted.
    assert (metrics["num_target_files_removed"], metrics["num_target_rows_copied"]) == (1, 5)
    assert (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"]) == (1, 1)
    written = _speed_rows(spark, uri).where("total_score IN (99, 5)").collect()
    assert sorted(row.window_hour for row in written) == [hour(3), hour(4)]


def test_a_speed_table_created_by_date_keeps_its_layout_and_the_streams_merge_is_bounded_by_its_days(spark, tmp_path):
    from deltalake import DeltaTable

    from lakehouse.layers.speed import SpeedLayer
    from tests.test_dedupe import scores

    settings = make_settings(tmp_path / "home")
    ensure_table(BY_DATE, settings)  # as the catalog created __speed before
    layer = SpeedLayer(spark, settings, PIPELINE, query_id="q")
    layer.process_batch(scores(spark, 0, ("a", "12:00:10"), ("b", "12:03:20")), 0)

    table = DeltaTable(local_path(TABLES.speed.uri(settings)).as_posix())
    assert table.metadata().partition_columns == ["window_date"]
    merge = table.history(1)[0]
    assert merge["operation"] == "MERGE", merge
    predicate = merge["operationParameters"]["mergePredicate"]  # as delta-rs renders it
    assert "t.window_date" in predicate and "window_hour" not in predicate, predicate
    speed = spark.read.format("delta").load(TABLES.speed.uri(settings))
    rows = speed.select("window_start", "team", "total_score", "window_date").collect()
    assert sorted(tuple(row) for row in rows) == [
        (datetime(2026, 1, 5, 12, 0), "red", 3, DAY.date()),
        (datetime(2026, 1, 5, 12, 2), "red", 3, DAY.date()),
    ]


def test_a_merge_is_bounded_by_the_hours_its_panes_start_in_or_their_days_on_a_table_by_date():
    import pyarrow as pa

    # As Spark hands the panes over: instants in UTC.
    starts = [hour(23) + timedelta(minutes=58), hour(3) + timedelta(minutes=5), hour(23)]
    panes = pa.table(
        {"window_start": pa.array([start.replace(tzinfo=UTC) for start in starts], pa.timestamp("us", "UTC"))}
    )

    assert merge_bound(panes, ("window_hour",)) == (
        "t.window_hour IN (TIMESTAMP '2026-01-05T03:00:00', TIMESTAMP '2026-01-05T23:00:00')"
    )
    assert merge_bound(panes, ("window_date",)) == "t.window_date BETWEEN DATE '2026-01-05' AND DATE '2026-01-05'"
    assert merge_bound(panes, ()) is None


def test_a_replacement_of_a_range_writes_the_window_date_of_its_rows(spark, tmp_path):
    settings = make_settings(tmp_path)
    ensure_table(TABLES.batch, settings)
    uri = TABLES.batch.uri(settings)
    rows = inline_frame(
        spark,
        GOLD + ", run_id string, updated_at timestamp",
        [(hour(h), hour(h + 1), "red", h, "run", hour(50)) for h in (22, 23, 24)],
    )

    replace_where(rows, uri, f"window_start >= TIMESTAMP'{hour(22)}' AND window_start < TIMESTAMP'{hour(25)}'")

    written = spark.read.format("delta").load(uri)
    assert sorted((r["window_date"], r["total_score"]) for r in written.collect()) == [
        (DAY.date(), 22),
        (DAY.date(), 23),
        ((DAY + timedelta(days=1)).date(), 24),
    ]
    assert spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()["partitionColumns"] == ["window_date"]


def test_an_upsert_runs_once_per_app_id_and_version(spark, tmp_path):
    uri = _speed_table(spark, tmp_path, range(2))
    first = inline_frame(spark, PANES, [(hour(1), hour(2), "red", 5, False)])
    replayed = inline_frame(spark, PANES, [(hour(1), hour(2), "red", 6, False)])

    _upsert(first, uri, version=1)
    _upsert(replayed, uri, version=1)

    window = (F.col("window_start") == F.lit(hour(1))) & (F.col("team") == "red")
    assert [r["total_score"] for r in _speed_rows(spark, uri).where(window).collect()] == [5]


def test_a_table_only_delta_rs_commits_to_is_checkpointed_every_ten_commits_as_spark_would(spark, tmp_path):
    # __speed and the pane log get a commit per micro-batch, all through delta-rs, whose own default
    # is a checkpoint every 100 commits: every reader would replay up to 99 commit files.
    from lakehouse.location import local_path

    uri = _speed_table(spark, tmp_path, range(2))  # commits 0 and 1
    for version in range(10):
        _upsert(inline_frame(spark, PANES, [(hour(1), hour(2), "red", version, False)]), uri, version=version)

    assert list((local_path(uri) / "_delta_log").glob("*.checkpoint.parquet")), "no checkpoint after 12 commits"
    assert _speed_rows(spark, uri).where("team = 'red' AND total_score = 9").count() == 1


def test_a_read_of_a_window_range_is_pruned_to_the_hours_it_covers(spark, tmp_path):
    # Audits and the serving view filter on window_start; Delta derives the window_hour partition
    # filter from the generated column's expression.
    uri = _speed_table(spark, tmp_path, range(72))

    plan = spark.sql(
        f"EXPLAIN FORMATTED SELECT * FROM delta.`{uri}` "
        f"WHERE window_start >= TIMESTAMP'{hour(48)}' AND window_start < TIMESTAMP'{hour(50)}'"
    ).first()[0]

    partition_filters = [line for line in plan.splitlines() if "PartitionFilters" in line]
    assert partition_filters and all("window_hour" in line for line in partition_filters), plan


def _compaction_during(spark, uri: str, gates, write) -> None:
    """Run ``write`` while an OPTIMIZE of ``uri`` commits in the middle of it."""
    from delta.tables import DeltaTable

    _commit_during(gates, write, lambda: DeltaTable.forPath(spark, uri).optimize().executeCompaction())


def _commit_during(gates, write, other_commit) -> None:
    """Run ``write`` while ``other_commit`` commits in the middle of it.

    The write's rows pass through a Python UDF that announces the write has started (its Delta
    transaction has read the table by then) and holds it until the other commit has landed.
    """
    started, committed = gates
    failure: list[BaseException] = []

    def commit() -> None:
        try:
            deadline = time.monotonic() + 120
            while not started.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the write never started")
                time.sleep(0.05)
            other_commit()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(error)
        finally:
            committed.touch()

    committer = threading.Thread(target=commit)
    committer.start()
    try:
        write()
    finally:
        committer.join()
    assert not failure, failure


def _gated(frame, column: str, gates):
    started, compacted = (str(gate) for gate in gates)

    @F.udf(frame.schema[column].dataType)
    def hold(value):
        import time as _time
        from pathlib import Path as _Path

        _Path(started).touch()
        while not _Path(compacted).exists():
            _time.sleep(0.05)
        return value

    return frame.withColumn(column, hold(column))


HALF_PAST = hour(0) + timedelta(minutes=30)


def _two_files_in_an_hour(spark, tmp_path) -> str:
    uri = _speed_table(spark, tmp_path / "home", range(0, 2))
    # A second file in the first hour's partition, so that the compaction has files to merge there.
    inline_frame(spark, GOLD, [(HALF_PAST, hour(1), "red", 20)]).write.format("delta").mode("append").save(uri)
    return uri


def _last_operations(spark, uri: str) -> list[str]:
    return [row.operation for row in spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").orderBy("version").collect()][-2:]


def test_a_merge_that_loses_its_commit_to_a_concurrent_compaction_runs_again_and_lands_once(
    spark, tmp_path, caplog, monkeypatch
):
    # The daily OPTIMIZE runs beside the stream. It commits after the MERGE read the table and before
    # the MERGE commits; without the retry, delta-rs refuses the commit and the stream stops.
    import deltalake
    from delta.tables import DeltaTable

    uri = _two_files_in_an_hour(spark, tmp_path)
    compactions = []

    class CompactedMeanwhile(deltalake.DeltaTable):
        def merge(self, *args, **kwargs):
            if not compactions:  # this snapshot is read; the MERGE has not committed yet
                compactions.append(DeltaTable.forPath(spark, uri).optimize().executeCompaction())
            return super().merge(*args, **kwargs)

    monkeypatch.setattr(deltalake, "DeltaTable", CompactedMeanwhile)
    _upsert(inline_frame(spark, PANES, [(hour(0), hour(1), "red", 99, False)]), uri, version=0)

    assert any("lost a commit race" in record.getMessage() for record in caplog.records), (
        "the compaction did not commit inside the write: the test proved nothing"
    )
    expected = [
        (hour(0), hour(1), "red", 99),
        (hour(0), hour(1), "blue", 0),
        (hour(1), hour(2), "red", 10),
        (hour(1), hour(2), "blue", 10),
        (HALF_PAST, hour(1), "red", 20),
    ]
    assertDataFrameEqual(
        spark.read.format("delta").load(uri).select(*SPEED_COLUMNS[:4]), inline_frame(spark, GOLD, expected)
    )
    assert _last_operations(spark, uri) == ["OPTIMIZE", "MERGE"]


def test_a_replacement_that_loses_its_commit_to_a_concurrent_compaction_runs_again_and_lands_once(
    spark, tmp_path, caplog
):
    # The same race for the batch layer's replaceWhere, with Delta's own conflict detection.
    uri = _two_files_in_an_hour(spark, tmp_path)
    gates = (tmp_path / "write-started", tmp_path / "compacted")
    rows = _gated(inline_frame(spark, GOLD, [(hour(0), hour(1), "red", 99)]), "total_score", gates)
    first_window = f"window_start >= '{hour(0)}' AND window_start < '{HALF_PAST}'"

    _compaction_during(spark, uri, gates, lambda: replace_where(rows, uri, first_window))

    assert any("lost a commit race" in record.getMessage() for record in caplog.records), (
        "the compaction did not commit inside the write: the test proved nothing"
    )
    expected = [(hour(0), hour(1), "red", 99), (hour(1), hour(2), "red", 10), (hour(1), hour(2), "blue", 10)]
    expected.append((HALF_PAST, hour(1), "red", 20))
    assertDataFrameEqual(
        spark.read.format("delta").load(uri).select(*SPEED_COLUMNS[:4]), inline_frame(spark, GOLD, expected)
    )
    assert _last_operations(spark, uri) == ["OPTIMIZE", "WRITE"]


def test_a_stamped_append_that_may_be_a_replay_skips_a_table_holding_its_stamp(spark, tmp_path):
    uri = str(tmp_path / "stamped")
    rows = "app_id string, batch_id long, value long"
    inline_frame(spark, rows, []).write.format("delta").save(uri)
    append_stamped_once(inline_frame(spark, rows, [("q", 0, 1), ("q", 0, 2)]), uri, "q", 0)
    append_stamped_once(inline_frame(spark, rows, [("q", 0, 1), ("q", 0, 2)]), uri, "q", 0)  # a replay
    append_stamped_once(inline_frame(spark, rows, [("q", 1, 3)]), uri, "q", 1)
    append_stamped_once(inline_frame(spark, rows, [("other", 1, 4)]), uri, "other", 1)
    assertDataFrameEqual(
        spark.read.format("delta").load(uri),
        inline_frame(spark, rows, [("q", 0, 1), ("q", 0, 2), ("q", 1, 3), ("other", 1, 4)]),
    )


# -- the batch layer's chunk write: whole window_date partitions, the rest of their days kept ------

BATCH = GOLD + ", run_id string, updated_at timestamp"


def _batch_layer_holding_two_days(spark, home):
    """A batch layer whose ``__batch`` holds two teams' hourly windows over two days, run ``old``."""
    from lakehouse.layers.batch import BatchLayer

    layer = BatchLayer(spark, make_settings(home), PIPELINE)
    old = [(hour(h), hour(h + 1), team, h, "old", hour(60)) for h in range(48) for team in ("red", "blue")]
    inline_frame(spark, BATCH, old).write.format("delta").mode("append").save(layer.tables.batch.uri(layer.settings))
    return layer


def _batch_rows(spark, layer) -> dict[tuple[datetime, str], tuple[int, str]]:
    rows = spark.read.format("delta").load(layer.tables.batch.uri(layer.settings)).collect()
    return {(row.window_start, row.team): (row.total_score, row.run_id) for row in rows}


@pytest.mark.parametrize("chunk", [(hour(20), hour(26)), (hour(24), hour(48))], ids=["across-midnight", "whole-day"])
def test_a_chunk_write_replaces_exactly_its_windows_by_whole_days(spark, tmp_path, chunk):
    layer = _batch_layer_holding_two_days(spark, tmp_path)
    before = _batch_rows(spark, layer)
    first, end = chunk
    hours = range(int((first - DAY).total_seconds() // 3600), int((end - DAY).total_seconds() // 3600))
    # The recomputation found red in every window of the chunk and blue in none.
    new = inline_frame(spark, BATCH, [(hour(h), hour(h + 1), "red", 1000 + h, "new", hour(61)) for h in hours])

    replace_where(*chunk_replacement(spark, layer.tables.batch.uri(layer.settings), new, chunk))

    expected = {key: value for key, value in before.items() if not first <= key[0] < end}
    expected.update({(hour(h), "red"): (1000 + h, "new") for h in hours})
    assert _batch_rows(spark, layer) == expected
    # Whole partitions named by the condition: Delta removed files, and rewrote none row by row.
    last = spark.sql(f"DESCRIBE HISTORY delta.`{layer.tables.batch.uri(layer.settings)}` LIMIT 1").first()
    assert last["operationParameters"]["predicate"].startswith("window_date >= DATE'")
    assert last["operationMetrics"]["numAddedChangeFiles"] == "0"


@pytest.mark.parametrize("chunk", [(hour(20), hour(26)), (hour(24), hour(48))], ids=["across-midnight", "whole-day"])
def test_a_chunk_replaced_through_delta_rs_changes_its_windows_only_and_feeds_the_change_feed(spark, tmp_path, chunk):
    layer = _batch_layer_holding_two_days(spark, tmp_path)
    uri = layer.tables.batch.uri(layer.settings)
    before, version = _batch_rows(spark, layer), _version(spark, uri)
    first, end = chunk
    hours = range(int((first - DAY).total_seconds() // 3600), int((end - DAY).total_seconds() // 3600))
    new = inline_frame(spark, BATCH, [(hour(h), hour(h + 1), "red", 1000 + h, "new", hour(61)) for h in hours])

    replace_rows(new.toArrow(), uri, chunk_predicate(chunk), layer.settings)

    expected = {key: value for key, value in before.items() if not first <= key[0] < end}
    expected.update({(hour(h), "red"): (1000 + h, "new") for h in hours})
    assert _batch_rows(spark, layer) == expected
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version + 1).load(uri)
    changes = sorted((r.window_start, r.team, r._change_type) for r in feed.collect())
    old_rows = [(hour(h), team, "delete") for h in hours for team in ("red", "blue")]
    assert changes == sorted([*old_rows, *((hour(h), "red", "insert") for h in hours)])


def test_a_delta_rs_replacement_that_loses_its_commit_to_a_concurrent_compaction_runs_again(
    spark, tmp_path, caplog, monkeypatch
):
    import deltalake
    from delta.tables import DeltaTable

    layer = _batch_layer_holding_two_days(spark, tmp_path)
    uri = layer.tables.batch.uri(layer.settings)
    extra = inline_frame(spark, BATCH, [(hour(3), hour(4), "green", 3, "old", hour(60))])
    extra.write.format("delta").mode("append").save(uri)  # a second file in the first day, to compact
    compactions, write = [], deltalake.write_deltalake

    def compacted_meanwhile(table, *args, **kwargs):
        if not compactions:  # the snapshot the write reads is open; it has not committed yet
            compactions.append(DeltaTable.forPath(spark, uri).optimize().executeCompaction())
        return write(table, *args, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", compacted_meanwhile)
    new = inline_frame(spark, BATCH, [(hour(0), hour(1), "red", 99, "new", hour(61))])
    replace_rows(new.toArrow(), uri, chunk_predicate((hour(0), hour(1))), layer.settings)

    assert any("lost a commit race" in record.getMessage() for record in caplog.records), (
        "the compaction did not commit inside the write: the test proved nothing"
    )
    rows = _batch_rows(spark, layer)
    assert rows[(hour(0), "red")] == (99, "new") and (hour(0), "blue") not in rows
    # Two teams over two days; 00:00 lost blue, and 03:00 gained green.
    assert rows[(hour(3), "green")] == (3, "old") and len(rows) == 48 * 2 - 1 + 1
    assert _last_operations(spark, uri) == ["OPTIMIZE", "WRITE"]


def test_two_chunks_of_one_day_replaced_at_once_both_land(spark, tmp_path, caplog, monkeypatch):
    """Two backfill chunks committing at once, as with two slots in the backfill pool (an operator may
    set them in Airflow's UI): both rewrite the day's file, and the one that loses the race runs again
    on the other's commit, so neither undoes the other."""
    import threading

    import deltalake

    layer = _batch_layer_holding_two_days(spark, tmp_path)
    uri = layer.tables.batch.uri(layer.settings)
    chunks = [(hour(h), hour(h + 1)) for h in (0, 1)]
    new = {
        c: inline_frame(spark, BATCH, [(c[0], c[1], "red", 1000 + c[0].hour, "new", hour(61))]).toArrow()
        for c in chunks
    }
    both_opened, write, first_attempt = threading.Barrier(2, timeout=60), deltalake.write_deltalake, threading.local()

    def together(table, *args, **kwargs):
        if not getattr(first_attempt, "done", False):  # each writer holds its snapshot; neither has committed
            first_attempt.done = True
            both_opened.wait()
        return write(table, *args, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", together)
    failures = []

    def replace(chunk) -> None:
        try:
            replace_rows(new[chunk], uri, chunk_predicate(chunk), layer.settings)
        except Exception as error:  # noqa: BLE001 - said by the assertion below
            failures.append(error)

    writers = [threading.Thread(target=replace, args=(chunk,)) for chunk in chunks]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)

    assert not failures
    assert any("lost a commit race" in record.getMessage() for record in caplog.records), (
        "the writers did not race: the test proved nothing"
    )
    rows = _batch_rows(spark, layer)
    assert rows[(hour(0), "red")] == (1000, "new") and rows[(hour(1), "red")] == (1001, "new")
    assert (hour(0), "blue") not in rows and (hour(1), "blue") not in rows and len(rows) == 48 * 2 - 2


def _version(spark, uri: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").first()["version"]


def test_a_change_to_a_kept_row_that_commits_during_a_chunk_write_is_not_undone(spark, tmp_path, caplog):
    # The chunk [20:00, 02:00) rewrites both days' partitions, writing back the rows of those days it
    # does not replace. A correction of 10:00, outside the chunk, lands while the chunk is written:
    # the chunk must not write back the value 10:00 had before.
    layer = _batch_layer_holding_two_days(spark, tmp_path)
    uri = layer.tables.batch.uri(layer.settings)
    chunk = (hour(20), hour(26))
    gates = (tmp_path / "write-started", tmp_path / "corrected")
    new = _gated(
        inline_frame(spark, BATCH, [(hour(h), hour(h + 1), "red", 1000 + h, "new", hour(61)) for h in range(20, 26)]),
        "total_score",
        gates,
    )
    correction = inline_frame(spark, BATCH, [(hour(10), hour(11), "red", 999, "correction", hour(62))])

    _commit_during(
        gates,
        lambda: replace_where(*chunk_replacement(spark, layer.tables.batch.uri(layer.settings), new, chunk)),
        lambda: replace_where(correction, uri, f"window_start = TIMESTAMP'{hour(10)}' AND team = 'red'"),
    )

    assert any("lost a commit race" in record.getMessage() for record in caplog.records), (
        "the correction did not commit inside the chunk's write: the test proved nothing"
    )
    rows = _batch_rows(spark, layer)
    assert rows[(hour(10), "red")] == (999, "correction")
    assert rows[(hour(21), "red")] == (1021, "new") and (hour(21), "blue") not in rows
    assert rows[(hour(30), "blue")] == (30, "old") and len(rows) == 48 * 2 - 6


def test_table_version_is_the_latest_commit_even_one_made_outside_this_jvm(spark, tmp_path):
    """table_version asks Delta's log directly (an internal API): it must agree with the history,
    see a commit another writer made a moment ago, and say clearly when there is no table."""
    import pyarrow as pa
    from delta.tables import DeltaTable
    from deltalake import write_deltalake

    from lakehouse.errors import LakehouseError
    from lakehouse.storage.catalog import table_version

    uri = str(tmp_path / "table")
    spark.range(3).write.format("delta").save(uri)
    assert table_version(spark, uri) == 0
    write_deltalake(uri, pa.table({"id": pa.array([7], pa.int64())}), mode="append")  # not through this JVM
    assert table_version(spark, uri) == 1 == DeltaTable.forPath(spark, uri).history(1).first()["version"]
    with pytest.raises(LakehouseError, match="missing is not a Delta table"):
        table_version(spark, str(tmp_path / "missing"))


def test_a_table_created_through_delta_rs_is_the_table_spark_would_have_created(spark, tmp_path):
    """Columns, generated column, partitions and properties as Spark reads them, and Spark's own
    write to it computes the generated column (the replacement test above writes none)."""
    from lakehouse.storage.catalog import CHANGE_DATA_FEED, CHECKPOINT_EVERY_10_COMMITS

    settings = make_settings(tmp_path)
    ensure_table(TABLES.speed, settings)
    uri = TABLES.speed.uri(settings)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
    assert detail["partitionColumns"] == ["window_hour"]
    assert detail["properties"] == {**CHECKPOINT_EVERY_10_COMMITS, **CHANGE_DATA_FEED}
    table = spark.read.format("delta").load(uri)
    assert [(f.name, f.dataType) for f in table.schema.fields] == [
        *((f.name, f.dataType) for f in TABLES.speed.columns.fields),
        *((name, kind) for name, kind, _ in TABLES.speed.generated),
    ]
    inline_frame(spark, GOLD, [(hour(30), hour(31), "red", 5)]).write.format("delta").mode("append").save(uri)
    assert _speed_rows(spark, uri).first()["window_hour"] == hour(30)
    assert spark.sql(f"SELECT * FROM table_changes('delta.`{uri}`', 1)").count() == 1


def test_a_table_whose_creation_was_killed_before_its_first_commit_is_created_again(tmp_path):
    """A job killed while Spark created a table left a ``_delta_log`` folder with no commit (on which
    Spark's CREATE TABLE IF NOT EXISTS did nothing at all): the table is created there."""
    from deltalake import DeltaTable

    from lakehouse.storage import catalog

    settings = make_settings(tmp_path / "home")
    location = local_path(catalog.BACKFILL_RUNS.uri(settings))
    (location / "_delta_log" / "_staged_commits").mkdir(parents=True)
    (location / "_delta_log" / ".00000000000000000000.json.3f1c.tmp").write_text('{"commitInfo":')
    catalog.ensure_table(catalog.BACKFILL_RUNS, settings)
    assert DeltaTable(str(location)).version() == 0
    assert DeltaTable(str(location)).to_pyarrow_table().num_rows == 0


def test_a_job_that_loses_the_race_to_create_a_table_finds_the_winners(tmp_path, monkeypatch):
    """Two jobs both find no table and both create it: one commit 0 lands, and the other job goes on
    with that table instead of failing."""
    from deltalake import DeltaTable

    from lakehouse.storage import catalog

    settings = make_settings(tmp_path / "home")
    catalog.ensure_table(catalog.BACKFILL_RUNS, settings)  # the winner
    location = local_path(catalog.BACKFILL_RUNS.uri(settings))
    winner = DeltaTable(str(location)).metadata().id
    looks, in_storage = [], catalog.table_in_storage

    def late_look(*args):  # the loser's first look came before the winner's commit landed
        looks.append(args)
        return len(looks) > 1 and in_storage(*args)

    monkeypatch.setattr(catalog, "table_in_storage", late_look)
    catalog.ensure_table(catalog.BACKFILL_RUNS, settings)

    assert len(looks) == 2, "the loser did not look again after its creation failed"
    assert (DeltaTable(str(location)).version(), DeltaTable(str(location)).metadata().id) == (0, winner)


def test_a_local_table_is_found_without_listing_its_log(tmp_path, monkeypatch):
    """A local log's first commit, or its checkpoint pointer once the commits before the checkpoint
    are gone, says the table exists without delta-rs's listing of the whole log; a log folder with
    neither is asked of delta-rs, which finds no table in one holding only a writer's temporary file."""
    from deltalake import DeltaTable, write_deltalake

    from lakehouse.storage import catalog

    settings = make_settings(tmp_path / "home")
    catalog.ensure_table(catalog.BACKFILL_RUNS, settings)
    uri, location = catalog.BACKFILL_RUNS.uri(settings), local_path(catalog.BACKFILL_RUNS.uri(settings))
    table = DeltaTable(str(location))
    for _ in range(2):
        write_deltalake(table, table.to_pyarrow_table(), mode="append")
    table.create_checkpoint()
    (location / "_delta_log" / f"{0:020d}.json").unlink()  # as the log's clean-up leaves it
    listed = []
    monkeypatch.setattr(DeltaTable, "is_deltatable", lambda *args, **kwargs: listed.append(args) or False)
    assert catalog.table_in_storage(uri, settings) and not listed

    started = local_path(catalog.BATCH_COVERAGE.uri(settings)) / "_delta_log"
    started.mkdir(parents=True)
    (started / ".00000000000000000000.json.3f1c.tmp").write_text('{"commitInfo":')
    assert not catalog.table_in_storage(catalog.BATCH_COVERAGE.uri(settings), settings) and listed
    monkeypatch.undo()
    assert not catalog.table_in_storage(catalog.BATCH_COVERAGE.uri(settings), settings)


def test_a_location_holding_something_else_is_a_one_line_error(tmp_path):
    from lakehouse.errors import LakehouseError
    from lakehouse.storage import catalog

    settings = make_settings(tmp_path / "home")
    location = local_path(catalog.BACKFILL_RUNS.uri(settings))
    location.parent.mkdir(parents=True)
    location.write_text("a file where the table's folder should be")
    with pytest.raises(LakehouseError, match="could not be created: .*Not a directory") as raised:
        catalog.ensure_table(catalog.BACKFILL_RUNS, settings)
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value), str(raised.value)
