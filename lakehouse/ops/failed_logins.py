"""Failed logins per name, and the wait they impose, for the logins checked in Python: Airflow's
``/auth/token`` (lakehouse.ops.airflow_auth_manager). The Spark service's endpoints keep the same
rule in Java (lakehouse/serving/java/lakehouse/serving/FailedLogins.java); a unit test holds the
two rules' figures equal.

Checking a password costs a slow hash (by design) or a directory bind: unchecked, a client sending
wrong passwords as fast as it can would keep a core busy and try as many as it likes. After FREE
failures in a row, a name's next password is not checked until a wait has passed, from 1 s
doubling to LONGEST_WAIT_SECONDS; a try within the wait is refused at once, unchecked. A success
clears the name. Every name counts, known or not, so that the refusal says nothing of who exists.

A check is claimed before it starts and settled when it ends, so tries sent in parallel share the
allowance of tries sent one after another: a check under way counts as a failure until it is
settled, and past the free failures only one runs at a time for a name.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

FREE = 10
LONGEST_WAIT_SECONDS = 60
# Beyond this many names, those whose wait is over are forgotten: random names cannot fill memory.
MOST_NAMES = 10_000
MOST_DOUBLINGS = 16


class TooManyFailures(Exception):
    """A try within a name's wait, refused unchecked; ``wait_left`` in whole seconds."""

    def __init__(self, name: str, wait_left: int):
        super().__init__(f"too many failed logins for user {name} in a row: the next is checked in {wait_left} s")
        self.wait_left = wait_left


@dataclasses.dataclass
class _Tries:
    in_a_row: int = 0
    under_way: int = 0
    last_failed_at: float = 0.0


def wait_after(in_a_row: int) -> float:
    """Seconds a name waits once past its free failures: 1 s after the FREE-th, doubling with each one."""
    return float(min(2 ** min(max(in_a_row - FREE, 0), MOST_DOUBLINGS), LONGEST_WAIT_SECONDS))


class FailedLogins:
    """The failures in a row of each name seen, shared by the threads of one process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._tries: dict[str, _Tries] = {}
        self._lock = threading.Lock()

    def claim(self, name: str) -> None:
        """Claim the right to check one password of ``name``, or raise TooManyFailures with the wait
        left. Every claim must be settled, once."""
        now = self._clock()
        with self._lock:
            if len(self._tries) >= MOST_NAMES:
                self._forget_waits_over(now)
            tries = self._tries.setdefault(name, _Tries())
            left = self._wait_left(tries, now)
            if left > 0:
                raise TooManyFailures(name, max(1, int(left + 0.999)))
            tries.under_way += 1

    def settled(self, name: str, matched: bool) -> None:
        """End a claim: the password matched, or it did not (a check that failed to run counts as not)."""
        with self._lock:
            tries = self._tries.get(name)
            if tries is None:
                return
            tries.under_way = max(0, tries.under_way - 1)
            if matched:
                tries.in_a_row = 0
                if not tries.under_way:
                    del self._tries[name]
                return
            tries.in_a_row += 1
            tries.last_failed_at = self._clock()

    @staticmethod
    def _wait_left(tries: _Tries, now: float) -> float:
        counted = tries.in_a_row + tries.under_way
        if counted < FREE:
            return 0.0
        if tries.under_way:
            # The check under way will fail or not; either way the next may start only after it.
            return wait_after(counted)
        return tries.last_failed_at + wait_after(tries.in_a_row) - now

    def _forget_waits_over(self, now: float) -> None:
        for name, tries in list(self._tries.items()):
            if not tries.under_way and tries.last_failed_at + LONGEST_WAIT_SECONDS < now:
                del self._tries[name]
