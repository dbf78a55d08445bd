"""The freshness suite's clock: when a row first became visible, read from a Delta table's commits."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from bench.visibility import FirstCommits

pytestmark = pytest.mark.unit


def _commit(table, names: list[str], mode: str = "append") -> None:
    write_deltalake(str(table), pa.table({"bridge_id": names, "vehicles": list(range(len(names)))}), mode=mode)


def _committed_at(table, version: int) -> float:
    return os.stat(table / "_delta_log" / f"{version:020d}.json").st_mtime


def test_each_value_gets_the_time_of_the_first_commit_that_added_it(tmp_path):
    table = tmp_path / "gold"
    first = FirstCommits(table, "bridge_id", "probe-")
    assert first.scan() == {}  # no table yet: nothing visible
    _commit(table, ["b-1", "probe-00000"])
    _commit(table, ["probe-00000", "probe-00001"])  # a MERGE rewrites a file that held it already
    assert first.scan() == {"probe-00000": _committed_at(table, 0), "probe-00001": _committed_at(table, 1)}
    _commit(table, ["probe-00000", "probe-00001", "probe-00002"], mode="overwrite")  # complete mode
    assert first.scan() == {
        "probe-00000": _committed_at(table, 0),
        "probe-00001": _committed_at(table, 1),
        "probe-00002": _committed_at(table, 2),
    }


def test_values_outside_the_prefix_are_not_counted(tmp_path):
    table = tmp_path / "gold"
    _commit(table, ["b-1", "b-probe-1", "probe"])
    assert FirstCommits(table, "bridge_id", "probe-").scan() == {}


def test_files_in_partitions_whose_names_delta_escapes_are_read(tmp_path):
    table = tmp_path / "gold"
    rows = pa.table({"bridge_id": ["probe-00000"], "zone": ["north east:1"]})
    write_deltalake(str(table), rows, partition_by=["zone"])
    assert FirstCommits(table, "bridge_id", "probe-").scan() == {"probe-00000": _committed_at(table, 0)}
