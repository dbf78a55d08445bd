"""When the Spark service caches a batch table again (lakehouse.serving.batch_cache.settled)."""

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
