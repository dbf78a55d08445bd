"""Which rows of a micro-batch are later copies of an event id in it, decided in the driver.

The rule is ``number_copies``' (copy 1 arrived first: the least source file, then the least text),
applied to the rows the batch's one parse job collects (``lakehouse.layers.micro_batch.parse_batch``).
Numbering the copies in Spark took a window over the batch, a shuffle: 0.25 s of a 2.8 s batch at
33,000 events, whatever the number of copies. The driver needs each row's id, file and a hash of its
text; it fetches the text itself only for copies of an id in one file whose texts differ (a small
Spark job). A producer's resend repeats its line, so that is rare.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from lakehouse.dataflow import transforms as tx
from lakehouse.dataflow.pipelines.base import Pipeline

TEXT_HASH = "_text_hash"
SOURCE_FILE, TEXT = tx.ARRIVAL_ORDER


def copy_columns() -> list[str | Column]:
    """What the driver needs of each row besides its ``BATCH_ROW`` and id: its file and a hash of its
    text (two copies of one line hash alike)."""
    return [SOURCE_FILE, F.xxhash64(TEXT).alias(TEXT_HASH)]


def later_copies_in(rows: pa.Table, pipeline: Pipeline, texts_of: Callable[[pa.Array], pa.Table]) -> np.ndarray:
    """Which of ``rows`` (a batch's valid events: ``BATCH_ROW``, id and ``copy_columns``) are not
    their id's first copy in the batch (``tx.later_copies``): a boolean per row.

    Args:
        rows: the batch's rows.
        pipeline: the pipeline (its event id column).
        texts_of: the ``BATCH_ROW`` and text of the rows whose ``BATCH_ROW`` it is given.
    """
    ids = rows.column(pipeline.event_id)
    counts = pc.value_counts(ids)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    if not len(repeated):
        return np.zeros(rows.num_rows, bool)
    copies = rows.filter(pc.is_in(ids, repeated)).select([tx.BATCH_ROW, pipeline.event_id, SOURCE_FILE, TEXT_HASH])
    later = tx.later_copies(_with_texts(copies, pipeline, texts_of), pipeline)
    return pc.is_in(rows.column(tx.BATCH_ROW), later).to_numpy(zero_copy_only=False)


def _with_texts(copies: pa.Table, pipeline: Pipeline, texts_of: Callable[[pa.Array], pa.Table]) -> pa.Table:
    """``copies`` with their text where it orders them: for copies of an id in one file whose
    texts differ. Elsewhere the text is left empty: copies in different files go by the file, and
    copies of one line are the same event whichever is kept."""
    in_one_file = [pipeline.event_id, SOURCE_FILE]
    texts_per_file = copies.group_by(in_one_file).aggregate([(TEXT_HASH, "count_distinct")])
    differ = texts_per_file.filter(pc.greater(texts_per_file[f"{TEXT_HASH}_count_distinct"], 1))
    if not differ.num_rows:
        return copies.append_column(TEXT, pa.array([""] * copies.num_rows, pa.string()))
    ordered_by_text = copies.join(differ.select(in_one_file), in_one_file, join_type="inner")
    texts = texts_of(ordered_by_text.column(tx.BATCH_ROW)).select([tx.BATCH_ROW, TEXT])
    with_texts = copies.join(texts, tx.BATCH_ROW, join_type="left outer")
    return with_texts.set_column(
        with_texts.schema.get_field_index(TEXT), TEXT, pc.fill_null(with_texts.column(TEXT), "")
    )
