"""When the Spark service caches a batch table again (lakehouse.serving.batch_cache), and how it learns
that a table moved."""

from lakehouse.serving.batch_cache import SETTLED_SECONDS, settled


def test_a_table_seen_first_is_cached_at_once():
    assert settled(None, 3, now=100.0) == ((3, 100.0 - SETTLED_SECONDS), True)


def test_a_table_that_moved_waits_until_it_has_held_still_for_the_settling_time():
    seen, still = settled((3, 0.0), 4, now=100.0)
    assert (seen, still) == ((4, 100.0), False)
    assert settled(seen, 4, now=100.0 + SETTLED_SECONDS - 0.1) == (seen, False)
    assert settled(seen, 4, now=100.0 + SETTLED_SECONDS) == (seen, True)


def test_each_commit_of_a_backfill_restarts_the_wait():
    seen, _ = settled((3, 0.0), 4, now=100.0)
    seen, still = settled(seen, 5, now=100.0 + SETTLED_SECONDS)
    assert (seen, still) == ((5, 100.0 + SETTLED_SECONDS), False)


def test_the_tick_reads_the_version_another_writer_committed_from_storage(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from lakehouse.storage.catalog import committed_version

    uri = str(tmp_path / "batch")
    rows = pa.table({"window_start": pa.array([1, 2], pa.int64())})
    write_deltalake(uri, rows)
    assert committed_version(uri) == 0

    write_deltalake(uri, rows, mode="append")
    write_deltalake(uri, rows, mode="overwrite")
    assert committed_version(uri) == 2
