"""A team's own pipelines, declared in a project folder (docs/pipelines.md). No Spark here."""
