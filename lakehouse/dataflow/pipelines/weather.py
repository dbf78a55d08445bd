"""Zone temperatures, and the book's windowed join (*Grokking Streaming Systems*, "Windowed joins"):
vehicles per zone and half hour, with the zone's temperature over the same half hour."""

from decimal import Decimal

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dataflow.pipelines.base import (
    DECIMAL,
    STRING,
    TIMESTAMP,
    Band,
    Field,
    Metric,
    Pipeline,
    Window,
    WindowJoin,
)
from lakehouse.dataflow.pipelines.row_rules import row_rules
from lakehouse.dataflow.pipelines.toll_traffic import TOLL_TRAFFIC_BY_ZONE

TEMPERATURE_TYPE = T.DecimalType(5, 2)
TEMPERATURE_SUM_TYPE = T.DecimalType(18, 2)

# A sensor per zone reads the air temperature every 10 minutes; a sensor can miss readings, and a
# reading can arrive long after it was taken (the sensor's uplink was down).
ZONE_TEMPERATURES = Pipeline(
    name="zone_temperatures",
    description="Temperature readings per 30-minute window and zone: how many, and their sum",
    fields=(
        Field("event_id", STRING, T.StringType()),
        Field("zone", STRING, T.StringType()),
        Field("temperature_c", DECIMAL, TEMPERATURE_TYPE),
        Field("event_time", TIMESTAMP, T.TimestampType()),
    ),
    keys=("zone",),
    window=Window(size="30m"),
    metrics=(
        Metric("readings", lambda: F.count(F.lit(1)), T.LongType()),
        Metric("temperature_sum", lambda: F.sum("temperature_c").cast(TEMPERATURE_SUM_TYPE), TEMPERATURE_SUM_TYPE),
    ),
    # Row rules live in expectations/zone_temperatures.raw_events.json.
    rules=row_rules("zone_temperatures"),
    watermark_delay="5m",
)

# Each zone's neighbours, nearest first: a zone without a reading in a window takes the first of
# them that has one (the book's rule).
ZONE_NEIGHBOURS = (
    ("n1", ("n2", "n3")),
    ("n2", ("n1", "n3")),
    ("n3", ("n2", "n1")),
    ("s1", ("s2", "s3")),
    ("s2", ("s1", "s3")),
    ("s3", ("s2", "s1")),
)

TOLL_WEATHER = WindowJoin(
    name="toll_weather",
    description="Vehicles per 30-minute window and zone, with the zone's mean temperature and its band",
    events=TOLL_TRAFFIC_BY_ZONE,
    readings=ZONE_TEMPERATURES,
    key="zone",
    reading_sum="temperature_sum",
    reading_count="readings",
    measure="temperature",
    neighbours=ZONE_NEIGHBOURS,
    bands=(
        Band("freezing", Decimal("0")),
        Band("cold", Decimal("10")),
        Band("mild", Decimal("20")),
        Band("warm", Decimal("30")),
        Band("hot"),
    ),
)
