"""Timing and memory measurement shared by every benchmark."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable

import psutil


def summary(values: list[float]) -> dict:
    """Median with min and max: the form every figure takes in the results."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: with few samples it is one of them)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))
    return ordered[rank - 1]


def percentiles(seconds: list[float]) -> dict:
    """p50 and p95 of ``seconds``, rounded to milliseconds, and how many there were."""
    if not seconds:
        return {"p50_s": None, "p95_s": None, "n": 0}
    p50, p95 = (round(percentile(seconds, fraction), 3) for fraction in (0.5, 0.95))
    return {"p50_s": p50, "p95_s": p95, "n": len(seconds)}


def timed(action: Callable[[], object]) -> tuple[float, object]:
    began = time.perf_counter()
    outcome = action()
    return time.perf_counter() - began, outcome


def repeat(action: Callable[[], object], runs: int) -> list[float]:
    return [timed(action)[0] for _ in range(runs)]


def wait_until_idle(at_least: float, busy_below: float = 0.15, patience: float = 60.0) -> float:
    """Seconds waited for the machine to go quiet: ``at_least`` seconds, then until a whole second
    passes with all cores together under ``busy_below`` busy, or ``patience`` more seconds have.

    A side timed while a process of an earlier side still works (a Spark service rebuilding its
    cache after the commits it saw, say) is timed on a machine the other side did not have."""
    began = time.monotonic()
    time.sleep(at_least)
    deadline = time.monotonic() + patience
    while psutil.cpu_percent(interval=1.0) >= busy_below * 100 and time.monotonic() < deadline:
        pass
    return time.monotonic() - began


class PeakMemory:
    """Peak resident memory of a process tree, sampled in the background, split Python vs JVM.

    Python is the root process (the driver's Python side); the JVM is its ``java`` descendant, as in a
    local SparkSession or a CLI run. Sampling every 0.2 s misses spikes shorter than that: peaks are a lower bound.
    """

    def __init__(self, root_pid: int, interval: float = 0.2):
        self.root_pid, self.interval = root_pid, interval
        self.python_bytes = 0
        self.jvm_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                root = psutil.Process(self.root_pid)
                for process in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        rss, name = process.memory_info().rss, process.name()
                        if name == "java":
                            self.jvm_bytes = max(self.jvm_bytes, rss)
                        elif process.pid == self.root_pid:
                            self.python_bytes = max(self.python_bytes, rss)
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def as_dict(self) -> dict:
        return {
            "python_peak_rss_mib": round(self.python_bytes / 2**20, 1),
            "jvm_peak_rss_mib": round(self.jvm_bytes / 2**20, 1),
        }
