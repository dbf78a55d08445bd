"""When a micro-batch runs with Spark's generated code (lakehouse.layers.speed): from
GENERATED_CODE_FROM_ROWS rows, or for its parse, before its rows are counted, from
GENERATED_CODE_FROM_BYTES bytes; a batch of unknown size without."""

from __future__ import annotations

from lakehouse.layers.speed import (
    GENERATED_CODE,
    GENERATED_CODE_FROM_BYTES,
    GENERATED_CODE_FROM_ROWS,
    MICRO_BATCH_CONFS,
    code_generation_for,
    log_lines,
    planned_bytes,
)


def test_a_small_batch_and_one_of_unknown_size_keep_the_micro_batch_confs_which_turn_generated_code_off():
    assert code_generation_for(GENERATED_CODE_FROM_ROWS - 1) == {}
    assert code_generation_for(input_bytes=GENERATED_CODE_FROM_BYTES - 1) == {}
    assert code_generation_for(None) == code_generation_for(input_bytes=None) == {}
    assert MICRO_BATCH_CONFS["spark.sql.codegen.wholeStage"] == "false"


def test_a_large_batch_turns_generated_code_back_on_by_its_rows_or_its_bytes():
    assert code_generation_for(GENERATED_CODE_FROM_ROWS) == GENERATED_CODE
    assert code_generation_for(input_bytes=GENERATED_CODE_FROM_BYTES) == GENERATED_CODE
    assert set(GENERATED_CODE) == {key for key in MICRO_BATCH_CONFS if key.startswith("spark.sql.codegen.")}


def test_a_batch_of_log_files_is_sized_by_its_files_before_it_is_read(spark, tmp_path):
    for lines in (1000, 2000, 3000):
        (tmp_path / f"{lines}.jsonl").write_text('{"event_id": "e"}\n' * lines)
    sizes = sum(path.stat().st_size for path in tmp_path.iterdir())
    sized = []
    query = (
        log_lines(spark.readStream.format("text").load(str(tmp_path)))
        .writeStream.foreachBatch(lambda batch, _: sized.append(planned_bytes(batch)))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sized == [sizes]
