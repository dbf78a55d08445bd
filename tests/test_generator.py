"""The deterministic event generator and the files it writes into the retained log. No Spark."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.errors import LakehouseError
from lakehouse.generator import MALFORMED_KINDS, GeneratorConfig, generate, generate_records
from lakehouse.location import local_path
from lakehouse.settings import Settings
from lakehouse.storage.log import partition_dir

# Crosses midnight (so both the ingest date and hour change) with plenty of every kind of record.
CONFIG = GeneratorConfig(
    events=600,
    seed=11,
    start=datetime(2026, 1, 5, 23, 59, 30, tzinfo=UTC),
    rate=10.0,
    late_fraction=0.05,
    late_delay="1m",
    duplicate_fraction=0.05,
    malformed_fraction=0.1,
    events_per_file=40,
)


def settings_at(home: Path) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(home)})


def log_root(settings: Settings) -> Path:
    return local_path(settings.pipeline_log_uri("toll_traffic"))


def log_files(settings: Settings) -> list[Path]:
    """Every published log file, in file-name order (the order the log promises is arrival order)."""
    return sorted(log_root(settings).glob("ingest_date=*/ingest_hour=*/*.jsonl"), key=lambda path: path.name)


def file_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def written(tmp_path) -> Settings:
    settings = settings_at(tmp_path / "home")
    generate(settings, CONFIG)
    return settings


def records_by_file(settings: Settings) -> list[tuple[Path, list[tuple[datetime, int, str]]]]:
    """Pair each file, in name order, with the generated records it should hold, in arrival order."""
    records, _ = generate_records(CONFIG)
    paired, position = [], 0
    for path in log_files(settings):
        count = len(file_lines(path))
        paired.append((path, records[position : position + count]))
        position += count
    assert position == len(records)
    return paired


# --- determinism -----------------------------------------------------------------------------------


def test_same_seed_and_config_give_identical_records():
    assert generate_records(CONFIG) == generate_records(CONFIG)


def test_same_seed_and_config_write_identical_files(tmp_path):
    contents = []
    for home in ("first", "second"):
        settings = settings_at(tmp_path / home)
        generate(settings, CONFIG)
        root = log_root(settings)
        contents.append({str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()})
    assert contents[0] == contents[1]
    assert len(contents[0]) > 1


def test_different_seed_gives_different_records():
    other = dataclasses.replace(CONFIG, seed=CONFIG.seed + 1)
    assert [line for _, _, line in generate_records(CONFIG)[0]] != [line for _, _, line in generate_records(other)[0]]


# --- what is generated -----------------------------------------------------------------------------


def test_records_are_the_valid_events_plus_their_duplicate_copies_plus_the_malformed_ones():
    records, kinds = generate_records(CONFIG)
    malformed = sum(count for kind, count in kinds.items() if kind.startswith("malformed:"))
    assert len(records) == kinds["valid"] + kinds["duplicate_copies"] + malformed
    assert kinds["valid"] + malformed == CONFIG.events


def test_every_malformed_kind_appears_given_enough_events():
    _, kinds = generate_records(CONFIG)
    assert {kind for kind in kinds if kind.startswith("malformed:")} == {f"malformed:{k}" for k in MALFORMED_KINDS}


def test_malformed_records_cycle_evenly_through_the_kinds():
    _, kinds = generate_records(CONFIG)
    counts = [kinds[f"malformed:{kind}"] for kind in MALFORMED_KINDS]
    assert max(counts) - min(counts) <= 1


def test_duplicate_copies_repeat_a_valid_line_verbatim():
    records, kinds = generate_records(CONFIG)
    # Truncated (bad_json) lines are short prefixes and may coincide: count complete lines only.
    repeats = Counter(line for _, _, line in records if line.endswith("}"))
    assert sum(count - 1 for count in repeats.values()) == kinds["duplicate_copies"]


def test_valid_lines_carry_every_field_of_the_pipeline_with_tolls_to_the_cent():
    records, _ = generate_records(dataclasses.replace(CONFIG, malformed_fraction=0.0))
    required = {f.name for f in get_pipeline("toll_traffic").fields if f.required}
    events = [json.loads(line) for _, _, line in records]
    assert all(required <= event.keys() for event in events)
    assert all(Decimal(repr(event["toll_amount"])).as_tuple().exponent >= -2 for event in events)
    assert all(event["event_time"].endswith("Z") and event["sent_at"].endswith("Z") for event in events)


def test_records_come_in_arrival_order():
    records, _ = generate_records(CONFIG)
    arrivals = [arrival for arrival, _, _ in records]
    assert arrivals == sorted(arrivals)


def test_generate_reports_the_records_and_files_it_wrote(tmp_path):
    settings = settings_at(tmp_path / "home")
    result = generate(settings, CONFIG)
    files = log_files(settings)
    assert (result.records, result.files) == (sum(len(file_lines(path)) for path in files), len(files))


# --- the files in the log --------------------------------------------------------------------------


def test_files_land_in_the_ingest_hour_folder_of_their_first_record(written):
    for path, records in records_by_file(written):
        assert str(path.parent.relative_to(log_root(written))) == partition_dir(records[0][0])


def test_the_log_spans_the_date_and_hour_change_of_the_config(written):
    folders = {str(path.parent.relative_to(log_root(written))) for path in log_files(written)}
    assert {"ingest_date=2026-01-05/ingest_hour=23", "ingest_date=2026-01-06/ingest_hour=00"} <= folders


def test_no_file_spans_two_ingest_hours(written):
    for path, records in records_by_file(written):
        assert {partition_dir(arrival) for arrival, _, _ in records} == {partition_dir(records[0][0])}, path.name


def test_file_names_start_with_the_arrival_time_of_their_first_record(written):
    for path, records in records_by_file(written):
        assert path.name.startswith(f"{records[0][0]:%Y%m%dT%H%M%S%f}Z-")


def test_file_names_sort_in_arrival_order(written):
    in_name_order = [line for path in log_files(written) for line in file_lines(path)]
    assert in_name_order == [line for _, _, line in generate_records(CONFIG)[0]]


def test_no_file_holds_more_than_events_per_file_records(written):
    assert max(len(file_lines(path)) for path in log_files(written)) == CONFIG.events_per_file


def test_nothing_is_left_in_the_incoming_temp_folder(written):
    incoming = log_root(written) / "_incoming"
    assert incoming.is_dir() and list(incoming.iterdir()) == []


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["late_fraction", "duplicate_fraction", "malformed_fraction"])
@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_validate_rejects_a_fraction_outside_zero_to_one(name, value):
    with pytest.raises(LakehouseError, match=rf"^{name} must be between 0 and 1$"):
        GeneratorConfig(**{name: value}).validate()


@pytest.mark.parametrize("name", ["late_fraction", "duplicate_fraction", "malformed_fraction"])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_validate_accepts_the_fraction_bounds(name, value):
    GeneratorConfig(**{name: value}).validate()


@pytest.mark.parametrize(
    "changes",
    [
        {"events": -1},
        {"rate": 0.0},
        {"bridges": 0},
        {"booths_per_bridge": 0},
        {"events_per_file": 0},
        {"wall_rate": -1.0},
        {"late_delay": "soon"},
    ],
)
def test_validate_rejects_impossible_knobs(changes):
    with pytest.raises(LakehouseError):
        GeneratorConfig(**changes).validate()


def test_generate_records_validates_its_config_first():
    with pytest.raises(LakehouseError, match="malformed_fraction must be between 0 and 1"):
        generate_records(GeneratorConfig(malformed_fraction=2.0))
