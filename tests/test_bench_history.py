"""bench/history.jsonl: each full bench run appends one line per figure and never rewrites the past."""

from __future__ import annotations

import json
from pathlib import Path

from bench import history
from bench.run import headline, record_history

HISTORY = Path(__file__).resolve().parents[1] / "bench" / "history.jsonl"


def _job(seconds: float) -> dict:
    return {"seconds": {"median": seconds, "min": seconds, "max": seconds, "runs": 1}}


RESULTS = {
    "backfill": {"jobs": {"lakehouse_log": _job(3.0), "bare_log": _job(2.0), "duckdb_log": _job(0.5)}},
    "growth": {name: _job(seconds) for name, seconds in {"backfill_1h": 1.0, "backfill_1d": 2.0,
                                                         "audit_1h": 4.0, "audit_1d": 8.0}.items()},
}  # fmt: skip


def _figures(results: dict) -> dict[str, list[dict]]:
    return {suite: headline({suite: measured}) for suite, measured in results.items()}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_line_per_figure_under_the_suite_that_measured_it():
    lines = history.records(_figures(RESULTS), date="2026-12-01", commit="abc123", events=100_000, runs=3)
    assert [(line["suite"], line["metric"]) for line in lines] == [
        ("backfill", "backfill from log vs bare Spark"),
        ("backfill", "backfill from log vs DuckDB"),
        ("growth", "backfill 1 day vs 1 hour (linear: 24)"),
        ("growth", "audit 1 day vs 1 hour (linear: 24)"),
    ]
    first = lines[0]
    assert tuple(first) == history.FIELDS
    assert first["value"] == 3.0 and first["baseline"] == 2.0 and first["ratio"] == 1.5 and first["unit"] == "s"
    assert first["target"] == "<= 1.15" and first["commit"] == "abc123" and first["date"] == "2026-12-01"


def test_appending_keeps_every_earlier_line_byte_for_byte(tmp_path):
    path = tmp_path / "history.jsonl"
    first = history.records(_figures(RESULTS), date="2026-12-01", commit=None, events=4000, runs=1)
    history.append(path, first)
    before = path.read_bytes()
    second = history.records(_figures({"backfill": RESULTS["backfill"]}), date="2026-12-02", commit="def", events=4000,
                             runs=1)  # fmt: skip
    history.append(path, second)
    assert path.read_bytes().startswith(before)
    assert _lines(path) == first + second
    assert path.read_bytes().endswith(b"\n")


def test_a_last_line_without_its_newline_is_kept_whole(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"date": "2026-11-23", "metric": "m", "value": 1.0}')
    history.append(path, [{"date": "2026-12-01", "metric": "m", "value": 2.0}])
    assert [line["value"] for line in _lines(path)] == [1.0, 2.0]


def test_a_full_run_appends_its_figures_with_the_commit_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "current_commit", lambda *_: "0123abcd")
    report = {
        "finished_at": "2026-12-01T10:00:00+00:00",
        "plan": {"events": 100_000, "runs": 3},
        "machine": {"cpu": "a CPU", "cores": 2},
        "results": RESULTS,
    }
    path = tmp_path / "history.jsonl"
    record_history(report, path)
    lines = _lines(path)
    assert len(lines) == 4 and {line["commit"] for line in lines} == {"0123abcd"}
    assert {line["events"] for line in lines} == {100_000} and lines[0]["note"].endswith("a CPU, 2 cores")


def test_a_suite_with_a_data_set_or_runs_of_its_own_records_them(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "current_commit", lambda *_: "0123abcd")

    def rate(value):
        return {"median": value, "min": value, "max": value, "runs": 1}

    throughput = {
        "events": 400_000,
        "files_per_trigger": [],
        "jobs": {"lakehouse": {"events_per_s": rate(30_000.0)}, "bare": {"events_per_s": rate(40_000.0)}},
    }
    probes = {"p50_s": 4.0, "p95_s": 7.0, "median_batch_s": 2.0}
    freshness = {"runs": 2, "trigger_s": 5.0, "jobs": {job: probes for job in ("lakehouse", "hand_written", "bare")}}
    report = {
        "finished_at": "2026-12-04T10:00:00+00:00",
        "plan": {"events": 100_000, "runs": 3},
        "machine": {"cpu": "a CPU", "cores": 2},
        "results": {**RESULTS, "throughput": throughput, "freshness": freshness},
    }
    path = tmp_path / "history.jsonl"
    record_history(report, path)
    recorded = {line["suite"]: (line["events"], line["runs"]) for line in _lines(path)}
    assert recorded == {
        "backfill": (100_000, 3),
        "growth": (100_000, 3),
        "throughput": (400_000, 3),
        "freshness": (100_000, 2),
    }


def test_outside_git_the_commit_is_null(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert history.current_commit(tmp_path) is None


def test_the_recorded_history_is_one_well_formed_object_a_line():
    lines = _lines(HISTORY)
    assert lines
    for line in lines:
        assert set(history.FIELDS) <= set(line), line
        assert line["commit"] is None or len(line["commit"]) == 40, line
        assert line["value"] is not None or line["ratio"] is not None, line
    assert [line["date"] for line in lines] == sorted(line["date"] for line in lines)


def _layout(merge_s: float, mib_rewritten: float, read_s: float) -> dict:
    def seconds(value):
        return {"median": value, "min": value, "max": value, "runs": 3}

    return {"merge_s": seconds(merge_s), "mib_rewritten": mib_rewritten, "read_s": seconds(read_s)}


def test_the_speed_tables_layouts_are_each_set_against_the_day_partitions_under_their_size():
    from bench.speed_merge import history_lines

    results = {
        "panes": 10_000,
        "window_minutes": 5,
        "load_average_at_start": [9.0, 10.7, 11.1],
        "load_average_at_end": [6.8, 8.9, 10.4],
        "sizes": {
            "1000000": {"by_date": _layout(3.0, 2.0, 5.0), "by_hour": _layout(0.6, 0.1, 6.0)},
            "10000000": {"by_date": _layout(15.0, 40.0, 2.0), "by_hour": _layout(0.75, 2.5, 2.5)},
        },
    }

    lines = history_lines(results, "0123abcd", runs=3)

    assert [(line["metric"], line["ratio"], line["events"]) for line in lines] == [
        ("speed MERGE of 10,000 panes, by_hour vs by_date, a day of 1M rows", 0.2, 1_000_000),
        ("speed MERGE's data files rewritten, by_hour vs by_date, a day of 1M rows", 0.05, 1_000_000),
        ("a day's read of the speed table, by_hour vs by_date, a day of 1M rows", 1.2, 1_000_000),
        ("speed MERGE of 10,000 panes, by_hour vs by_date, a day of 10M rows", 0.05, 10_000_000),
        ("speed MERGE's data files rewritten, by_hour vs by_date, a day of 10M rows", 0.062, 10_000_000),
        ("a day's read of the speed table, by_hour vs by_date, a day of 10M rows", 1.25, 10_000_000),
    ]
    assert {line["suite"] for line in lines} == {"speed_merge"} and {line["commit"] for line in lines} == {"0123abcd"}
    assert lines[0]["note"].endswith("load average at start 9.0, 10.7, 11.1; load average at end 6.8, 8.9, 10.4")
