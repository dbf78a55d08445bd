"""The two execution layers (speed: Structured Streaming; batch: bounded recomputation) and the jobs
built on them (late-data corrections, scenario replay)."""
