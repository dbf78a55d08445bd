"""Device clocks, corrected by the log's clock (DDIA ch. 11, "whose clock?").

A device stamps ``event_time`` and ``sent_at`` by its own clock, which may be minutes off. The log
stamps when it received the event by the platform's clock. Assuming the network delay is small,
the device's offset is ``received_at - sent_at``, and the event happened at
``event_time + (received_at - sent_at)`` by the platform's clock. docs/design.md, "Device clocks",
works an example through.

The file log receives a file at once: the writer names each file after its receive time (the
arrival of its first record), and every record of the file shares it. On Kafka, each record's
timestamp is its own receive time, and its locator carries it in the same form
(lakehouse.storage.kafka_log).
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column
from pyspark.sql import functions as F

# A log file's name: its receive time, then the writer's tag.
LOG_FILE_STAMP = "%Y%m%dT%H%M%S%f"
_STAMP_IN_PATH = r"(?:^|/)(\d{8}T\d{12})Z-[^/]*$"
SPARK_STAMP = "yyyyMMdd'T'HHmmssSSSSSS"  # LOG_FILE_STAMP in Spark's datetime pattern

# Quarantine reasons of a pipeline that corrects clocks.
CLOCK_SKEW_OUT_OF_BOUNDS = "clock_skew_out_of_bounds"
NO_RECEIVE_TIME = "no_receive_time"


def log_file_name(received: datetime, tag: str) -> str:
    """The name the log writer gives a file it received at ``received`` (UTC)."""
    return f"{received.strftime(LOG_FILE_STAMP)}Z-{tag}.jsonl"


def received_at(source_file: Column) -> Column:
    """When the log received the file a record came in (null for a file not named by the writer)."""
    stamp = F.regexp_extract(source_file, _STAMP_IN_PATH, 1)
    return F.when(stamp != "", F.try_to_timestamp(stamp, F.lit(SPARK_STAMP)))


def clock_offset_micros(received: Column, sent: Column) -> Column:
    """How far the device's clock is behind the log's, in microseconds (negative: ahead)."""
    return F.unix_micros(received) - F.unix_micros(sent)


def clock_offset_seconds(received, sent):
    """``clock_offset_micros`` on Arrow arrays (for the JVM-free status), in seconds."""
    import pyarrow.compute as pc

    return pc.divide(pc.subtract(received, sent).cast("int64"), 1_000_000.0)


def corrected_time(device_time: Column, offset_micros: Column) -> Column:
    """A device's timestamp moved onto the log's clock."""
    return F.timestamp_micros(F.unix_micros(device_time) + offset_micros)


def clock_problems(received: Column, sent: Column, bound_micros: int) -> list[tuple[Column, str]]:
    """The quarantine rules of clock correction, on typed values: no receive time to correct with,
    or an offset larger than the bound (a clock that wrong is broken, not skewed)."""
    offset = clock_offset_micros(received, sent)
    return [(received.isNull(), NO_RECEIVE_TIME), (F.abs(offset) > F.lit(bound_micros), CLOCK_SKEW_OUT_OF_BOUNDS)]
