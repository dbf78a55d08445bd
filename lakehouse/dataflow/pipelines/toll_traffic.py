"""Toll-bridge traffic (the running example of *Grokking Streaming Systems*): vehicles and revenue
per 1-minute window, bridge and vehicle type."""

import dataclasses

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dataflow.pipelines.base import (
    INTEGER,
    MONEY,
    STRING,
    TIMESTAMP,
    ClockCorrection,
    Dimension,
    DimensionJoin,
    Field,
    Metric,
    Pipeline,
    Window,
)
from lakehouse.dataflow.pipelines.row_rules import row_rules

VEHICLE_TYPES = ("car", "motorcycle", "van", "bus", "truck")
MONEY_TYPE = T.DecimalType(9, 2)
REVENUE_TYPE = T.DecimalType(18, 2)


# The bridges, as type-2 versions: a bridge may be renamed, or move to another region or zone.
BRIDGES = Dimension(name="bridges", key="bridge_id", attributes=("name", "region", "zone"))

TOLL_TRAFFIC = Pipeline(
    name="toll_traffic",
    description="Vehicles and toll revenue per 1-minute window, bridge and vehicle type",
    fields=(
        Field("event_id", STRING, T.StringType()),
        Field("bridge_id", STRING, T.StringType()),
        Field("booth_id", STRING, T.StringType()),
        Field("vehicle_type", STRING, T.StringType()),
        Field("axles", INTEGER, T.IntegerType()),
        Field("toll_amount", MONEY, MONEY_TYPE),
        Field("plate_hash", STRING, T.StringType(), required=False),
        Field("event_time", TIMESTAMP, T.TimestampType()),
        Field("sent_at", TIMESTAMP, T.TimestampType()),
    ),
    keys=("bridge_id", "vehicle_type"),
    window=Window(size="1m"),
    metrics=(
        Metric("vehicles", lambda: F.count(F.lit(1)), T.LongType()),
        Metric("revenue", lambda: F.sum("toll_amount").cast(REVENUE_TYPE), REVENUE_TYPE),
    ),
    # Row rules live in expectations/toll_traffic.raw_events.json, the suite the audit validates with.
    rules=row_rules("toll_traffic"),
    watermark_delay="2m",
    allowed_lateness="0s",
)

# Traffic over the last five minutes, refreshed every minute, per bridge.
TOLL_TRAFFIC_5M = TOLL_TRAFFIC.variant(
    "toll_traffic_5m",
    description="Vehicles and toll revenue per bridge over 5-minute windows sliding by 1 minute",
    keys=("bridge_id",),
    window=Window(size="5m", slide="1m"),
)

# A trip: one plate's crossings less than 30 minutes apart. Events without a plate cannot be
# attributed to a trip, so this variant requires the field (they are quarantined here only).
TOLL_TRIPS = TOLL_TRAFFIC.variant(
    "toll_trips",
    description="Trips per plate: crossings less than 30 minutes apart, and their total toll",
    fields=tuple(dataclasses.replace(f, required=True) if f.name == "plate_hash" else f for f in TOLL_TRAFFIC.fields),
    keys=("plate_hash",),
    window=Window(gap="30m"),
    metrics=(
        Metric("bridges_crossed", lambda: F.count(F.lit(1)), T.LongType()),
        Metric("total_toll", lambda: F.sum("toll_amount").cast(REVENUE_TYPE), REVENUE_TYPE),
    ),
)

# The same traffic on the log's clock: each booth's stamps are moved by its clock's offset, measured
# as received_at - sent_at. A clock more than 10 minutes off is broken, not skewed: quarantined.
TOLL_TRAFFIC_CORRECTED_CLOCKS = TOLL_TRAFFIC.variant(
    "toll_traffic_corrected_clocks",
    description="Vehicles and toll revenue per 1-minute window, bridge and vehicle type, booth clocks corrected",
    clocks=ClockCorrection(bound="10m", sent_at="sent_at", device="booth_id"),
)

# Traffic per region: each crossing counts in the region its bridge belonged to when it happened
# (dim.bridges as of the event's time); a bridge without a version then counts in "unknown".
TOLL_TRAFFIC_BY_REGION = TOLL_TRAFFIC.variant(
    "toll_traffic_by_region",
    description="Vehicles and toll revenue per 1-minute window and region, bridges' regions as of each event",
    keys=("region",),
    joins=DimensionJoin(BRIDGES, attributes=("region",)),
)

# Traffic per zone and half hour, the bridges' zones as of each event: the counted side of the
# windowed join toll_weather (lakehouse/dataflow/pipelines/weather.py).
TOLL_TRAFFIC_BY_ZONE = TOLL_TRAFFIC.variant(
    "toll_traffic_by_zone",
    description="Vehicles and toll revenue per 30-minute window and zone, bridges' zones as of each event",
    keys=("zone",),
    window=Window(size="30m"),
    joins=DimensionJoin(BRIDGES, attributes=("zone",)),
)
