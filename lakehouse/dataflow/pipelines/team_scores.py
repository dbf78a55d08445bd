"""Team scores (the running example of Streaming 102): the sum of points per team per 2-minute
fixed window, and per user per session of play (a 1-minute gap ends a session)."""

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.dataflow.pipelines.base import INTEGER, STRING, TIMESTAMP, Field, Metric, Pipeline, Window
from lakehouse.dataflow.pipelines.row_rules import row_rules

TEAM_SCORES = Pipeline(
    name="team_scores",
    description="Total score per team per 2-minute fixed window",
    fields=(
        Field("event_id", STRING, T.StringType()),
        Field("user", STRING, T.StringType()),
        Field("team", STRING, T.StringType()),
        Field("score", INTEGER, T.IntegerType()),
        Field("event_time", TIMESTAMP, T.TimestampType()),
    ),
    keys=("team",),
    window=Window(size="2m"),
    metrics=(Metric("total_score", lambda: F.sum("score").cast(T.LongType()), T.LongType()),),
    # Row rules live in expectations/team_scores.raw_events.json.
    rules=row_rules("team_scores"),
    watermark_delay="1m",
)

TEAM_SCORES_SESSIONS = TEAM_SCORES.variant(
    "team_scores_sessions",
    description="Total score per user per session of play (sessions end after a 1-minute gap)",
    keys=("user",),
    window=Window(gap="1m"),
)
