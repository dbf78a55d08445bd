"""Later copies of an id in a micro-batch, decided in the driver (lakehouse.layers.copies): rows
made in Python, no JVM. That the rule is ``number_copies``' is checked in tests/test_transforms.py."""

from __future__ import annotations

import pyarrow as pa

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.layers.copies import TEXT_HASH, later_copies_in

PIPELINE = get_pipeline("toll_traffic")


class Texts:
    """The texts of a batch's rows, recording which rows were asked for."""

    def __init__(self, lines: list[tuple[str, str, str]]):
        self.lines = lines
        self.asked: list[int] = []

    def __call__(self, batch_rows: pa.Array) -> pa.Table:
        self.asked += batch_rows.to_pylist()
        return pa.table({tx.BATCH_ROW: self.asked, "value": [self.lines[row][2] for row in self.asked]})


def later(lines: list[tuple[str, str, str]]) -> tuple[list[int], list[int]]:
    """The later copies among (event id, file, text) lines (their row numbers), and the rows whose
    text was fetched."""
    rows = pa.table(
        {
            tx.BATCH_ROW: pa.array(range(len(lines)), pa.int64()),
            PIPELINE.event_id: [event_id for event_id, _, _ in lines],
            "source_file": [source for _, source, _ in lines],
            TEXT_HASH: pa.array([hash(text) for _, _, text in lines], pa.int64()),
        }
    )
    texts = Texts(lines)
    marked = later_copies_in(rows, PIPELINE, texts)
    return [row for row, is_later in enumerate(marked) if is_later], sorted(texts.asked)


def test_a_batch_without_copies_has_no_later_copy_and_fetches_no_text():
    assert later([("a", "f1", "x"), ("b", "f1", "y")]) == ([], [])


def test_a_resent_line_keeps_the_copy_in_the_earliest_file_without_fetching_text():
    assert later([("a", "f3", "x"), ("a", "f1", "x"), ("b", "f1", "y"), ("a", "f2", "x")]) == ([0, 3], [])


def test_one_line_twice_in_a_file_keeps_exactly_one_copy_without_fetching_text():
    assert later([("a", "f1", "x"), ("a", "f1", "x")]) == ([1], [])


def test_copies_in_one_file_with_different_texts_fetch_their_texts_and_keep_the_least():
    lines = [("a", "f1", "x-b"), ("a", "f1", "x-a"), ("a", "f0", "x-c"), ("b", "f1", "y"), ("b", "f1", "y")]
    assert later(lines) == ([0, 1, 4], [0, 1])
