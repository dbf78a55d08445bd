"""The wait that failed logins impose on a name (lakehouse.ops.failed_logins, Airflow's /auth/token),
on a clock the tests move, and its figures against the Spark service's rule in Java."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakehouse.ops import failed_logins
from lakehouse.ops.failed_logins import FREE, FailedLogins, TooManyFailures, wait_after

JAVA_RULE = Path(__file__).parents[1] / "lakehouse/serving/java/lakehouse/serving/FailedLogins.java"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(logins: FailedLogins, name: str, times: int) -> None:
    for _ in range(times):
        logins.claim(name)
        logins.settled(name, matched=False)


def test_a_name_is_checked_freely_until_its_failures_in_a_row_then_waits_doubling():
    clock = Clock()
    logins = FailedLogins(clock)
    fail(logins, "vera", FREE)
    with pytest.raises(
        TooManyFailures, match=r"^too many failed logins for user vera in a row: the next is checked in 1 s$"
    ):
        logins.claim("vera")
    clock.now += 1.0
    fail(logins, "vera", 1)  # the 11th failure: the next waits 2 s
    clock.now += 1.5
    with pytest.raises(TooManyFailures) as refused:
        logins.claim("vera")
    assert refused.value.wait_left == 1
    clock.now += 0.5
    logins.claim("vera")


def test_a_success_clears_the_name_and_other_names_never_wait_for_it():
    clock = Clock()
    logins = FailedLogins(clock)
    fail(logins, "vera", FREE)
    logins.claim("otto")  # another name has its own allowance
    logins.settled("otto", matched=True)
    clock.now += 1.0
    logins.claim("vera")
    logins.settled("vera", matched=True)
    fail(logins, "vera", FREE - 1)  # counted from zero again
    logins.claim("vera")


def test_checks_under_way_count_as_failures_so_parallel_tries_get_no_more_checks():
    logins = FailedLogins(Clock())
    for _ in range(FREE):
        logins.claim("vera")  # ten checks at once, none settled yet
    with pytest.raises(TooManyFailures):
        logins.claim("vera")
    for _ in range(FREE):
        logins.settled("vera", matched=False)


def test_past_the_free_failures_one_check_runs_at_a_time():
    clock = Clock()
    logins = FailedLogins(clock)
    fail(logins, "vera", FREE)
    clock.now += 1.0
    logins.claim("vera")
    with pytest.raises(TooManyFailures):
        logins.claim("vera")  # the first is still being checked


def test_the_names_whose_wait_is_over_are_forgotten_beyond_the_most_names(monkeypatch):
    monkeypatch.setattr(failed_logins, "MOST_NAMES", 3)
    clock = Clock()
    logins = FailedLogins(clock)
    for name in ("a", "b", "c"):
        fail(logins, name, 1)
    clock.now += failed_logins.LONGEST_WAIT_SECONDS + 1
    logins.claim("d")
    assert set(logins._tries) == {"d"}


def test_the_wait_is_the_spark_services_rule_in_java():
    java = JAVA_RULE.read_text()
    assert int(re.search(r"static final int FREE = (\d+);", java)[1]) == FREE
    longest_millis = int(re.search(r"LONGEST_WAIT_MILLIS = ([\d_]+);", java)[1].replace("_", ""))
    assert longest_millis == failed_logins.LONGEST_WAIT_SECONDS * 1000
    doublings = re.search(r"Math\.min\(Math\.max\(inARow - FREE, 0\), (\d+)\)", java)
    assert int(doublings[1]) == failed_logins.MOST_DOUBLINGS
    assert [wait_after(n) for n in (FREE, FREE + 1, FREE + 5, FREE + 6, FREE + 40)] == [1, 2, 32, 60, 60]
