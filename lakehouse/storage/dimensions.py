"""The dimension tables ``dim.*``: change logs applied through delta-rs (no JVM), versions read by
the layers' Spark jobs, and the join of a pipeline's events to them (docs/design.md, "Joins")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakehouse.dataflow.dimensions import VALID_FROM, VALID_TO, apply_changes, join_as_of, naive_utc, parse_changes
from lakehouse.dataflow.pipelines.base import Dimension, Pipeline
from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings
from lakehouse.storage.catalog import committed_version, dimension_table, table_exists
from lakehouse.storage.frames import literal_frame
from lakehouse.storage.ops_tables import arrow_at, commit_hooks, delta_rs_location

# The pin of a dimension table that does not exist yet: every event joins to no version.
NO_VERSION = -1


@dataclasses.dataclass(frozen=True)
class ApplyReport:
    dimension: str
    applied: int
    already_present: int
    version: int

    def summary(self) -> str:
        return (
            f"dim.{self.dimension}: {self.applied} change(s) applied, {self.already_present} already present; "
            f"version {self.version}"
        )


def apply_change_file(settings: Settings, dimension: Dimension, path: Path) -> ApplyReport:
    """Apply a change log (JSON lines: the key, every attribute and ``valid_from``) to ``dim.<name>``,
    in one commit, or not at all. Applying the same file again changes nothing.

    The dimension has one writer at a time (this command, or the batch-layer DAG's task, which runs
    one at a time): two applies at once could each rewrite the versions the other did not see.

    Args:
        settings: where the table lives.
        dimension: the dimension the changes belong to.
        path: the change log.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise LakehouseError(f"cannot read the change log {path}: {error}") from None
    changes = parse_changes(lines, dimension, str(path))
    table = dimension_table(dimension)
    uri = table.uri(settings)
    current = arrow_at(uri, settings=settings)
    rows = current.to_pylist() if current is not None else []
    versions = [{**row, VALID_FROM: naive_utc(row[VALID_FROM]), VALID_TO: naive_utc(row[VALID_TO])} for row in rows]
    result = apply_changes(versions, changes, dimension)
    if result.applied or current is None:
        _overwrite(uri, table.arrow_schema, result.versions, settings)
    return ApplyReport(dimension.name, result.applied, result.already_present, dimension_version(settings, dimension))


def _overwrite(uri: str, schema, rows: list[dict], settings: Settings) -> None:
    """The dimension's rows replaced in one commit (a dimension is small: it is rewritten whole)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    location, options = delta_rs_location(uri, settings, writes=True)
    frame = pa.Table.from_pylist(rows, schema=schema)
    write_deltalake(
        location, frame, mode="overwrite", storage_options=options, post_commithook_properties=commit_hooks()
    )


def dimension_version(settings: Settings, dimension: Dimension) -> int:
    """The table's latest version (``NO_VERSION`` before the first change log)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return committed_version(dimension_table(dimension).uri(settings), settings)
    except TableNotFoundError:
        return NO_VERSION


def dimension_versions(spark: SparkSession, settings: Settings, dimension: Dimension, version: int | None) -> DataFrame:
    """The dimension's rows at ``version``; none before its first change log.

    Args:
        spark: the session.
        settings: where the dimension lives.
        dimension: the dimension read.
        version: the table version (None: the latest; ``NO_VERSION``: before any change log).
    """
    table = dimension_table(dimension)
    uri = table.uri(settings)
    if version == NO_VERSION or not table_exists(spark, uri):
        return literal_frame(spark, table.columns, [])
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(uri)


def with_dimensions(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, events: DataFrame, version: int | None = None
) -> DataFrame:
    """The events with the attributes ``pipeline.joins`` takes, as of each event's time; the events
    as they are for a pipeline without a join.

    Args:
        spark: the session.
        settings: where the dimension lives.
        pipeline: the pipeline whose join applies.
        events: its valid events.
        version: the dimension version to read (None: the latest; an audit passes its pin).
    """
    if pipeline.joins is None:
        return events
    versions = dimension_versions(spark, settings, pipeline.joins.dimension, version)
    return join_as_of(events, versions, pipeline.joins, pipeline.event_time)


def dimension_pins(settings: Settings, pipeline: Pipeline) -> dict[str, str]:
    """An audit's pin of the dimension its pipeline joins ({} without a join)."""
    if pipeline.joins is None:
        return {}
    dimension = pipeline.joins.dimension
    return {pin_name(dimension): str(dimension_version(settings, dimension))}


def pin_name(dimension: Dimension) -> str:
    return f"dim_{dimension.name}"


def inbox(settings: Settings, dimension: Dimension) -> Path:
    """Where change logs wait for the batch-layer DAG's task: ``<home>/dimensions/<name>/inbox``."""
    from lakehouse.location import local_path

    return local_path(settings.home) / "dimensions" / dimension.name / "inbox"


def apply_inbox(settings: Settings, dimension: Dimension) -> list[ApplyReport]:
    """Apply each change log waiting in the inbox, in name order, then move it to ``applied/``. A crash
    between the two applies the file again next time, which changes nothing."""
    waiting = inbox(settings, dimension)
    applied = waiting.parent / "applied"
    reports = []
    for path in sorted(waiting.glob("*.jsonl")) if waiting.exists() else []:
        reports.append(apply_change_file(settings, dimension, path))
        applied.mkdir(parents=True, exist_ok=True)
        path.replace(applied / path.name)
    return reports
