"""When a micro-batch runs with Spark's generated code (lakehouse.layers.speed): from
GENERATED_CODE_FROM_ROWS rows; a batch of unknown size (the parse of the first after a start) without."""

from __future__ import annotations

from lakehouse.layers.speed import GENERATED_CODE, GENERATED_CODE_FROM_ROWS, MICRO_BATCH_CONFS, code_generation_for


def test_a_small_batch_and_one_of_unknown_size_keep_the_micro_batch_confs_which_turn_generated_code_off():
    assert code_generation_for(GENERATED_CODE_FROM_ROWS - 1) == {}
    assert code_generation_for(None) == {}
    assert MICRO_BATCH_CONFS["spark.sql.codegen.wholeStage"] == "false"


def test_a_large_batch_turns_generated_code_back_on():
    assert code_generation_for(GENERATED_CODE_FROM_ROWS) == GENERATED_CODE
    assert set(GENERATED_CODE) == {key for key in MICRO_BATCH_CONFS if key.startswith("spark.sql.codegen.")}
