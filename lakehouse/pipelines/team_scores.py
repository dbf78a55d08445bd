"""Team scores (the running example of Streaming 102): the sum of points per team per 2-minute
fixed window, and per user per session of play (a 1-minute gap ends a session)."""

from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.pipelines.base import INTEGER, STRING, TIMESTAMP, Field, Metric, Pipeline, Rule, Window

MAX_SCORE = 1000


def _score_out_of_range():
    return ~F.col("score").between(0, MAX_SCORE)


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
    rules=(Rule("score_out_of_range", _score_out_of_range),),
    watermark_delay="1m",
)

TEAM_SCORES_SESSIONS = TEAM_SCORES.variant(
    "team_scores_sessions",
    description="Total score per user per session of play (sessions end after a 1-minute gap)",
    keys=("user",),
    window=Window(gap="1m"),
)
