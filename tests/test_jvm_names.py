"""A session's Python side asks the JVM what a class or static method is once, not on every use
(``lakehouse.storage.jvm_names``), and still reads static fields afresh."""

from __future__ import annotations

import contextlib

from pyspark.sql import functions as F


@contextlib.contextmanager
def commands_sent(spark):
    """The py4j commands sent inside the block, by their first letter (c: call, r: reflection)."""
    client = spark.sparkContext._gateway._gateway_client
    sent, send = [], client.send_command

    def counting(command, *args, **kwargs):
        sent.append(command[0])
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        yield sent
    finally:
        del client.send_command


def test_a_column_function_costs_one_call_into_the_jvm_once_its_names_are_known(spark):
    F.col("warm_up"), F.lit(0)
    with commands_sent(spark) as sent:
        columns = [F.col(f"c{i}") for i in range(3)] + [F.lit(1)]
    assert sent == ["c"] * 4, sent
    assert [str(c) for c in columns] == ["Column<'c0'>", "Column<'c1'>", "Column<'c2'>", "Column<'1'>"]


def test_static_methods_still_run_each_time_and_static_fields_are_read_each_time(spark):
    system = getattr(spark.sparkContext._jvm, "java.lang.System")
    for value in ("first", "second"):
        system.setProperty("lakehouse.jvm_names.probe", value)
        assert system.getProperty("lakehouse.jvm_names.probe") == value
    integer = getattr(spark.sparkContext._jvm, "java.lang.Integer")
    with commands_sent(spark) as sent:
        assert (integer.MAX_VALUE, integer.MAX_VALUE) == (2147483647, 2147483647)
    assert sent == ["r", "r"], f"a static field's value was kept instead of read again: {sent}"
