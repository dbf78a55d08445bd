"""Where data lives: the Spark session, the retained log, the Delta tables and their idempotent writes."""
