"""Hostile input, fuzzed: lines a broken or hostile producer could write, through the real parser.

Every line must come out exactly once, with exactly one fate, and with the reason (or the typed
values) the Spark-free oracle gives it: the oracle implements docs/design.md's validation rules
with Python's json module, so agreement on arbitrary lines means the rules, not just the code,
hold for them. Each example is one DataFrame of lines (a Spark job, no stream); raise the number of
examples with HYPOTHESIS_EXAMPLES.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers import speed
from lakehouse.layers.speed import SpeedLayer, run_speed_layer
from lakehouse.location import local_path
from lakehouse.serving.status import pipeline_status
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from lakehouse.storage.log import partition_dir
from lakehouse.storage.ops_tables import arrow_at
from tests.conftest import INTERPRETED, make_settings
from tests.frames import inline_frame
from tests.oracle import FIELDS, classify
from tests.test_transforms import VALID

PIPELINE = get_pipeline("toll_traffic")
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "20"))
# Lines are given to the parser as they come out of the log's line splitter: no line breaks.
NO_BREAKS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")


def _timestamps():
    """ISO-8601 stamps near the edges: year 0001 and 9999, zones, fractions, and near misses."""
    year = st.sampled_from(["0001", "1970", "2026", "9999", "10000", "0000"])
    zone = st.sampled_from(["Z", "+00:00", "+01:00", "-14:00", "+14:00", "", "z", "+1:00"])
    fraction = st.sampled_from(["", ".5", ".250", ".123456", ".123456789", ".1234567890"])
    clock = st.sampled_from(["00:00:00", "23:59:59", "08:00:30", "24:00:00", "23:60:00"])
    day = st.sampled_from(["01-01", "12-31", "02-29", "13-05", "01-32"])
    return st.builds(lambda y, d, c, f, z: f"{y}-{d}T{c}{f}{z}", year, day, clock, fraction, zone)


def _hostile_values():
    """JSON values a field should never hold, and a few it may."""
    deep = st.integers(1, 1500).map(lambda depth: "[" * depth + "]" * depth)
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.integers(1, 400).map(lambda digits: int("9" * digits)),
        st.floats(allow_nan=True, allow_infinity=True),
        st.decimals(places=3, allow_nan=False, allow_infinity=False).map(float),
        st.text(NO_BREAKS, max_size=30),
        st.sampled_from(["car", "truck", "Car", "", "\u0000", "\ufeff"]),
        _timestamps(),
        deep.map(lambda text: json.loads(text) if text.count("[") < 900 else text),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


@st.composite
def mutated_events(draw):
    """A valid event with some fields replaced, removed, duplicated or given hostile values."""
    event = dict(VALID)
    for name in draw(st.lists(st.sampled_from([f for f, _, _ in FIELDS]), max_size=3, unique=True)):
        action = draw(st.sampled_from(["replace", "remove", "timestamp"]))
        if action == "remove":
            event.pop(name, None)
        else:
            event[name] = draw(_timestamps() if action == "timestamp" else _hostile_values())
    text = json.dumps(event, allow_nan=True, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # a key written twice
        text = text[:-1] + ', "axles": 3}'
    return text


def lines():
    """One line of the log: a mutated event, its prefix, an event behind a BOM, or anything at all."""
    event_text = mutated_events()
    return st.one_of(
        event_text,
        event_text,
        st.tuples(event_text, st.integers(0, 200)).map(lambda pair: pair[0][: pair[1]]),
        event_text.map(lambda text: "\ufeff" + text),
        st.integers(1, 1500).map(lambda depth: '{"a":' * depth + "1" + "}" * depth),
        st.text(NO_BREAKS, max_size=60),
        st.sampled_from(["", " ", "null", "[]", "{}", "NaN", '"text"', "1e400", "-0", "{" * 5]),
    )


def _expected(line: str) -> tuple[str | None, dict | None]:
    event, reason = classify(line)
    return reason, event


def _parse(spark, batch: list[str]):
    raw = inline_frame(spark, "value string, source_file string", [(line, f"{i:04d}") for i, line in enumerate(batch)])
    return tx.parse_events(raw, PIPELINE).select("source_file", "reason", "event_time", "toll_amount")


def _event(**changes) -> str:
    return json.dumps({**VALID, **changes})


def _toll(text: str) -> str:
    return _event().replace('"toll_amount": 12.34', f'"toll_amount": {text}')


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# The inputs the fuzzer should meet, named: each must get the oracle's reason.
NAMED = {
    "NaN": _event(toll_amount=float("nan")),
    "Infinity": _event(axles=float("inf")),
    "400 digits": _event(axles=int("9" * 400)),
    "an exponent": _toll("1e2"),
    "a number past any double": _toll("1e400"),
    "year 0001": _event(event_time="0001-01-01T00:00:00Z", sent_at="0001-01-01T00:00:00Z"),
    "year 0 through its zone": _event(event_time="0001-01-02T00:30:00+01:00"),
    "a window ending in year 10000": _event(event_time="9999-12-31T23:59:59Z", sent_at="9999-12-31T23:59:59Z"),
    "nine digits of a second": _event(event_time="2026-01-05T08:00:30.123456789Z"),
    "a byte-order mark": "\ufeff" + _event(),
    "a raw control character": _event().replace('bridge-00"', 'bridge-00\u0007"'),
    "an escaped NUL": _event(bridge_id="a\u0000b"),
    "a key twice": _event()[:-1] + ', "axles": 3}',
    "a lone surrogate escaped": _event().replace('"e-1"', '"\\ud800"'),
    "a field nested 999 deep": _event().replace('"axles": 3', '"axles": ' + "[" * 999 + "]" * 999),
    "an event id nested": _event(event_id=[[["x"]]]),
    "a document nested 999 deep": _nested(999),
    "a document nested 1001 deep": _nested(1001),
    "a 10 MB event id": _event(event_id="x" * 10_000_000),
    "empty": "",
    "not JSON at all": "\x00\x01PK\x03\x04 binary",
}


@pytest.mark.slow
@pytest.mark.parametrize("code_generation", [True, False], ids=["compiled", "interpreted"])
def test_named_hostile_lines_get_the_oracles_reason_compiled_or_interpreted(spark, code_generation):
    """Compiled plans share common subexpressions; a container must not reach a recursive call either way."""
    batch = list(NAMED.values())
    previous = {key: spark.conf.get(key) for key in INTERPRETED}
    if code_generation:
        spark.conf.unset("spark.sql.codegen.wholeStage")
        spark.conf.unset("spark.sql.codegen.factoryMode")
    try:
        rows = _parse(spark, batch).select("source_file", "reason").collect()
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)
    got = {list(NAMED)[int(row.source_file)]: row.reason for row in rows}
    assert got == {name: _expected(line)[0] for name, line in NAMED.items()}


@pytest.mark.slow
@hypothesis_settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(lines(), min_size=1, max_size=40))
@example(batch=[_event(event_time="0001-01-01T00:00:00Z", sent_at="2026-01-05T08:00:31.000Z")])  # found in CI
def test_every_hostile_line_gets_the_oracles_fate_exactly_once(spark, batch):
    # Event times as microseconds since the epoch: PySpark cannot bring 0001-01-01T00:00:00 itself
    # back into Python (its datetime.fromtimestamp fails a day from the range's edge).
    rows = _parse(spark, batch).withColumn("event_time", F.unix_micros("event_time")).collect()

    assert sorted(row.source_file for row in rows) == [f"{i:04d}" for i in range(len(batch))]
    for row in rows:
        line = batch[int(row.source_file)]
        reason, event = _expected(line)
        shown = f"{line[:160]!r} ({len(line)} characters)"
        assert row.reason == reason, f"{shown}: the parser says {row.reason}, the oracle {reason}"
        if event is not None:
            typed = (_micros(event["event_time"]), Decimal(event["toll_amount"]))
            assert (row.event_time, row.toll_amount) == typed, shown


def _micros(moment: datetime) -> int:
    naive = moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
    return (naive - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _write(folder, name: str, data: bytes) -> None:
    (folder / name).write_bytes(data)


@pytest.mark.slow
def test_hostile_files_through_the_stream_give_every_line_one_fate(spark, settings):
    """Files as a broken producer leaves them: bytes that are not UTF-8, a byte-order mark, CRLF line
    ends, no newline at the end, an empty file, a binary file. The stream survives them all. (A
    byte-order mark opening a file is an encoding mark, and the reader skips it; inside a line it
    is not JSON. A byte that is not UTF-8 reads as U+FFFD.)"""
    hour = local_path(settings.pipeline_log_uri(PIPELINE.topic)) / partition_dir(datetime(2026, 1, 5, 8))
    hour.mkdir(parents=True)
    first, second = _event(event_id="e-1").encode(), _event(event_id="e-2").encode()
    _write(hour, "20260105T080001000000Z-crlf.jsonl", first + b"\r\n" + second + b"\r\n")
    _write(hour, "20260105T080002000000Z-latin1.jsonl", b'{"event_id": "caf\xe9"}\n' + _event(event_id="e-3").encode())
    _write(hour, "20260105T080003000000Z-bom.jsonl", b"\xef\xbb\xbf" + _event(event_id="e-4").encode() + b"\n")
    _write(hour, "20260105T080004000000Z-empty.jsonl", b"")
    _write(hour, "20260105T080005000000Z-binary.jsonl", bytes(b for b in range(256) if b not in b"\r\n"))
    # Two files end without a newline: written long ago as far as the stream knows (no grace to wait).
    # Four files a batch: the binary file is a batch of its own, with no valid line at all.
    hostile = settings.replace(unterminated_file_grace="0s", max_files_per_trigger=4)
    run_speed_layer(spark, hostile, PIPELINE, available_now=True)

    status = pipeline_status(settings, PIPELINE)
    assert status.balanced and status.read == 6
    assert status.fates == {"quarantined": 2, "duplicates": 0, "on_time": 4, "late": 0}
    fates = ("input_rows", "quarantined", "duplicates", "on_time", "late")
    batches = arrow_at(STREAM_PROGRESS.uri(settings), settings=settings).select(list(fates)).to_pylist()
    assert sorted(tuple(batch.values()) for batch in batches) == [(1, 1, 0, 0, 0), (5, 1, 0, 4, 0)]
    tables = pipeline_tables(PIPELINE)
    bronze = spark.read.format("delta").load(tables.bronze.uri(settings))
    assert sorted(row.event_id for row in bronze.collect()) == ["e-1", "e-2", "e-3", "e-4"]
    quarantine = spark.read.format("delta").load(tables.quarantine.uri(settings)).collect()
    assert sorted((row.source_file.rsplit("-", 1)[1], row.reason) for row in quarantine) == [
        ("binary.jsonl", "bad_json"),
        ("latin1.jsonl", "missing_field:bridge_id"),
    ]
    assert '{"event_id": "caf\ufffd"}' in {row.raw for row in quarantine}


@pytest.mark.parametrize("through", ["driver", "spark"])
def test_quarantined_lines_are_appended_once_through_the_driver_or_through_spark(spark, tmp_path, monkeypatch, through):
    """A batch's quarantined lines go to the driver and through delta-rs, or, when they are too many
    bytes for it, through Spark: either way the same rows, appended once however often the batch is
    replayed (a restarted stream runs its last batch again)."""
    if through == "spark":
        monkeypatch.setattr(speed, "QUARANTINE_TO_DRIVER_BYTES", 0)
    settings = make_settings(tmp_path)
    bad = ['{"event_id": "caf\ufffd"}', "\x00\x01 not json", _toll('"12.34"'), "x" * 5_000]
    lines = [_event(event_id="e-1"), *bad, _event(event_id="e-2")]
    frame = spark.createDataFrame([(line, "file:/log/000.jsonl") for line in lines], "value string, source_file string")
    query_id = f"quarantine-{through}"
    SpeedLayer(spark, settings, PIPELINE, query_id=query_id).process_batch(frame, 0)
    SpeedLayer(spark, settings, PIPELINE, query_id=query_id).process_batch(frame, 0)  # replayed after a restart

    uri = pipeline_tables(PIPELINE).quarantine.uri(settings)
    quarantine = spark.read.format("delta").load(uri)
    assert sorted(row.raw for row in quarantine.collect()) == sorted(bad)
    assert {tuple(row) for row in quarantine.select("app_id", "batch_id", "source_file").collect()} == {
        (f"speed:{PIPELINE.name}:{query_id}", 0, "file:/log/000.jsonl")
    }
    writer = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").first()["engineInfo"] or "delta-rs"
    assert writer.startswith("Apache-Spark") == (through == "spark"), writer


def _cut_off_file(settings, event_ids: tuple[str, str]) -> tuple[Path, bytes]:
    """A log file as a producer writing it in place leaves it mid-way: one whole line, then half of
    the next; returns the file, and the rest of that line."""
    hour = local_path(settings.pipeline_log_uri(PIPELINE.topic)) / partition_dir(datetime(2026, 1, 5, 8))
    hour.mkdir(parents=True)
    whole, cut = _event(event_id=event_ids[0]).encode(), _event(event_id=event_ids[1]).encode()
    path = hour / "20260105T080001000000Z-in-place.jsonl"
    path.write_bytes(whole + b"\n" + cut[:40])
    return path, cut[40:] + b"\n"


def _event_ids(spark, table, settings) -> list[str]:
    return sorted(row.event_id for row in spark.read.format("delta").load(table.uri(settings)).collect())


@pytest.mark.slow
def test_a_file_still_being_written_is_held_back_until_its_last_line_ends(spark, settings, monkeypatch, capfd):
    from lakehouse.layers import speed

    path, rest = _cut_off_file(settings, ("e-1", "e-2"))
    batch_reached_it = threading.Event()
    real_wait = speed.wait_for_line_ends

    def wait_for_line_ends(files, grace_s):
        batch_reached_it.set()  # the micro-batch has planned the file, cut off
        return real_wait(files, grace_s)

    def producer_finishes():
        batch_reached_it.wait(300)
        time.sleep(2)
        with path.open("ab") as file:
            file.write(rest)

    monkeypatch.setattr(speed, "wait_for_line_ends", wait_for_line_ends)
    threading.Thread(target=producer_finishes).start()
    run_speed_layer(spark, settings.replace(unterminated_file_grace="120s"), PIPELINE, available_now=True)
    tables = pipeline_tables(PIPELINE)
    assert _event_ids(spark, tables.bronze, settings) == ["e-1", "e-2"]
    assert _event_ids(spark, tables.quarantine, settings) == []
    assert "held back a micro-batch for files with no final newline yet" in capfd.readouterr().err


@pytest.mark.slow
def test_a_file_left_cut_off_is_read_as_it_is_once_the_grace_period_has_passed(spark, settings):
    _cut_off_file(settings, ("e-1", "e-2"))
    run_speed_layer(spark, settings.replace(unterminated_file_grace="2s"), PIPELINE, available_now=True)
    tables = pipeline_tables(PIPELINE)
    assert _event_ids(spark, tables.bronze, settings) == ["e-1"]
    quarantined = spark.read.format("delta").load(tables.quarantine.uri(settings)).collect()
    assert [(row.reason, len(row.raw)) for row in quarantined] == [("bad_json", 40)]
    assert pipeline_status(settings, PIPELINE).balanced
