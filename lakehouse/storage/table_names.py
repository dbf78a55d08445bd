"""Tables written outside Spark, declared without importing pyspark (``lakehouse.storage.catalog`` declares
them again as Spark schemas for SQL registration; a test keeps the two equal)."""

# ops.alerts: one row per alert raised by an orchestration failure (an audit that failed, say).
ALERTS_TABLE = ("ops", "alerts")
ALERTS_COLUMNS = (
    ("alert_id", "string"),
    ("source", "string"),
    ("dag_id", "string"),
    ("run_id", "string"),
    ("task_id", "string"),
    ("message", "string"),
    ("raised_at", "timestamp"),
)
