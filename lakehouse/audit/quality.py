"""Data quality in the audit: the pipeline's Great Expectations suites validated as a whole.

The suites in ``expectations/`` (GX 1.x JSON) are validated through a GX file context kept at
``<LAKEHOUSE_HOME>/gx`` against what the audit read, at the audit's pins:

- ``<p>.raw_events`` and ``<p>.bronze`` against the bronze rows of the range: every row the router
  let through must pass every row rule, and bronze must hold one well-formed copy per event;
- ``<p>.gold`` against the ``__speed`` rows of the range, with ``fresh_since`` (for the freshness
  expectation) set to the newest event time the log holds for the range less the suite's
  ``freshness_tolerance``.

Every expectation's outcome becomes a row of ``audit.data_quality`` (keyed by the audit's run id),
and GX renders its Data Docs to ``<LAKEHOUSE_HOME>/data_docs/index.html``, with their CDN links
pointed at copies inside the site (``lakehouse.audit.offline_docs``), so they read offline. A failed suite fails
the audit. GX stays off the streaming hot path: its import alone takes seconds, so the stream runs
the suite-derived Spark rules (``lakehouse.dataflow.pipelines.row_rules``) instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakehouse.audit.offline_docs import localize
from lakehouse.dataflow.pipelines.base import Pipeline
from lakehouse.dataflow.pipelines.row_rules import BRONZE, GOLD, RAW_EVENTS, load_suite, suite_path
from lakehouse.dataflow.transforms import in_window_range
from lakehouse.errors import LakehouseError
from lakehouse.eventtime import parse_duration
from lakehouse.layers.batch import in_bronze_span
from lakehouse.location import local_path
from lakehouse.settings import PROJECT_ROOT, Settings
from lakehouse.storage.catalog import DATA_QUALITY, ensure_table, pipeline_tables
from lakehouse.storage.ops_tables import append_rows

DATA_SOURCE = "lakehouse"
DOCS_SITE = "lakehouse"


@dataclasses.dataclass
class ExpectationOutcome:
    name: str
    expectation_type: str
    success: bool
    element_count: int | None
    unexpected_count: int | None
    observed: str


@dataclasses.dataclass
class SuiteOutcome:
    suite: str
    table: str
    table_version: str
    success: bool
    expectations: list[ExpectationOutcome]
    page: str | None = None  # this validation's Data Docs page (static HTML, readable offline)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]


def failure_text(outcome: ExpectationOutcome) -> str:
    """What went wrong, in a few words: rows that broke it, or the value GX observed."""
    if outcome.unexpected_count is not None:
        return (
            f"{outcome.name}: {outcome.unexpected_count} unexpected row{'s' if outcome.unexpected_count != 1 else ''}"
        )
    return f"{outcome.name}: observed {outcome.observed.strip(chr(34)) or 'nothing'}"


@dataclasses.dataclass
class QualityResult:
    suites: list[SuiteOutcome]
    data_docs: str  # the index page of the Data Docs site, a file path

    @property
    def ok(self) -> bool:
        return all(s.success for s in self.suites)


def gx_root(settings: Settings) -> Path:
    """Where the GX context and its Data Docs live: the home if it is local, else the checkout's."""
    try:
        return local_path(settings.home)
    except LakehouseError:
        return PROJECT_ROOT / ".lakehouse"


def data_docs_dir(settings: Settings) -> Path:
    return gx_root(settings) / "data_docs"


def _quiet_gx() -> None:
    # GX logs every metric it computes at INFO and warns about analytics; the audit prints its own summary.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)


def gx_context(settings: Settings):
    """The file context at ``<home>/gx`` with one Data Docs site, at ``<home>/data_docs``."""
    import os

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no network calls from an audit
    import great_expectations as gx

    _quiet_gx()
    root = gx_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(root))
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    site = {
        "class_name": "SiteBuilder",
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(data_docs_dir(settings))},
    }
    sites = context.get_config().data_docs_sites or {}
    for name in [n for n in sites if n != DOCS_SITE]:
        context.delete_data_docs_site(name)  # the default local_site: one site, one documented path
    if DOCS_SITE in sites:
        context.update_data_docs_site(DOCS_SITE, site)
    else:
        context.add_data_docs_site(DOCS_SITE, site)
    return context


def _suite(context, path: Path):
    """The suite file, (re)stored in the context: the file in ``expectations/`` is the truth."""
    import great_expectations as gx

    document = load_suite(path)
    document.pop("id", None)
    suite = gx.ExpectationSuite(**{k: v for k, v in document.items() if k in ("name", "expectations", "meta", "notes")})
    return context.suites.add_or_update(suite)


def _batch_definition(context, asset_name: str):
    source = context.data_sources.add_or_update_spark(name=DATA_SOURCE)
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(name=asset_name)
    try:
        return asset.get_batch_definition("whole")
    except KeyError:
        return asset.add_batch_definition_whole_dataframe("whole")


def _expectation_name(config: dict) -> str:
    meta = config.get("meta") or {}
    return meta.get("reason") or meta.get("name") or config.get("type", "?")


def _outcome(result) -> ExpectationOutcome:
    config = result.expectation_config.to_json_dict()
    details = result.result or {}
    observed = details.get("observed_value")
    return ExpectationOutcome(
        name=_expectation_name(config),
        expectation_type=config["type"],
        success=bool(result.success),
        element_count=details.get("element_count"),
        unexpected_count=details.get("unexpected_count"),
        observed="" if observed is None else json.dumps(observed, default=str),
    )


def validate_frame(context, suite_file: Path, asset_name: str, frame: DataFrame, parameters: dict | None = None):
    """Validate one frame with one suite file; the result is stored in the context for Data Docs.

    Args:
        context: the Great Expectations context that stores results for Data Docs.
        suite_file: the expectation suite's JSON file.
        asset_name: the data asset the rows are named as.
        frame: the rows to validate.
        parameters: values for the suite's ``$PARAMETER`` references.
    """
    import great_expectations as gx

    suite = _suite(context, suite_file)
    definition = gx.ValidationDefinition(
        name=f"{asset_name}:{suite.name}", data=_batch_definition(context, asset_name), suite=suite
    )
    definition = context.validation_definitions.add_or_update(definition)
    return definition.run(
        batch_parameters={"dataframe": frame}, expectation_parameters=parameters or {}, result_format="SUMMARY"
    )


def validation_page(settings: Settings, suite_name: str, asset_name: str, result) -> str:
    """Where the site builder puts this result's page: validations/<suite path>/<run name>/<run time>/<batch>.

    Args:
        settings: the home whose Data Docs site holds the page.
        suite_name: the suite validated.
        asset_name: the data asset the rows were named as.
        result: GX's validation result (its run id gives the run time).
    """
    run_time = result.meta["run_id"].run_time.strftime("%Y%m%dT%H%M%S.%fZ")
    folder = data_docs_dir(settings) / "validations" / Path(*suite_name.split(".")) / "__none__" / run_time
    return str(folder / f"{DATA_SOURCE}-{asset_name}.html")


def rebuild_docs(context, settings: Settings, validated: list[tuple]) -> None:
    """Render this audit's pages into the Data Docs site, and its index, once the results past the
    site's retention are gone (``expire_validations``): each result validated (suite name, asset,
    GX run id) and its suite's own page. A whole-site build renders every stored
    result again, a cost that grows with each audit (1,000 results: 8.1 s against 2.1 s, measured by
    bench/data_docs.py). GX's pages load their styles from CDNs: the pages written point at local
    copies."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    expire_validations(settings, datetime.now(UTC))
    identifiers = []
    for suite_name, asset, run_id in validated:
        suite = ExpectationSuiteIdentifier(name=suite_name)
        identifiers += [suite, ValidationResultIdentifier(suite, run_id, f"{DATA_SOURCE}-{asset}")]
    began = time.time()
    context.build_data_docs(site_names=[DOCS_SITE], resource_identifiers=identifiers)
    # Less a margin for file systems that keep modification times to the second or two.
    localize(data_docs_dir(settings), written_since=began - 2.0)


# A stored result's folder: its GX run time (validations/<suite path>/<run name>/<run time>/<batch>).
RUN_TIME_FOLDER = "%Y%m%dT%H%M%S.%fZ"


def validation_store(settings: Settings) -> Path:
    """Where the GX context keeps the validation results the Data Docs are rendered from."""
    return gx_root(settings) / "gx" / "uncommitted" / "validations"


def expire_validations(settings: Settings, now: datetime) -> int:
    """Delete the stored validation results, and their Data Docs pages, of runs older than
    ``data_docs_retention`` before ``now``; how many results it deleted. The next build's index
    no longer lists them."""
    oldest_kept = now.replace(tzinfo=None) - parse_duration(settings.data_docs_retention)
    results = _runs_before(validation_store(settings), ".json", oldest_kept)
    pages = _runs_before(data_docs_dir(settings) / "validations", ".html", oldest_kept)
    for stored in results + pages:
        stored.unlink()
        with contextlib.suppress(OSError):  # another result of the run is left in its folder
            stored.parent.rmdir()
    return len(results)


def _runs_before(folder: Path, suffix: str, moment: datetime) -> list[Path]:
    """The files under ``folder`` ending in ``suffix`` whose run-time folder is older than ``moment``."""
    found = []
    for stored in folder.rglob(f"*{suffix}") if folder.is_dir() else []:
        try:
            if datetime.strptime(stored.parent.name, RUN_TIME_FOLDER) < moment:
                found.append(stored)
        except ValueError:  # not a result's folder
            continue
    return found


def freshness_floor(newest_event_time: datetime | None, suite: dict) -> datetime:
    tolerance = parse_duration(suite.get("meta", {}).get("freshness_tolerance", "0s"))
    return (newest_event_time or datetime(1970, 1, 1)) - tolerance


def audit_frames(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, pins: dict[str, str], start: datetime, end: datetime
) -> dict[str, tuple[str, str, DataFrame]]:
    """Per suite layer: (table, version, the rows of the range at the pinned version).

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        pins: the table versions the audit reads, by name.
        start: first window start of the range.
        end: end of the range (exclusive).
    """
    tables = pipeline_tables(pipeline)

    def at(table, version: str) -> DataFrame:
        return spark.read.format("delta").option("versionAsOf", int(version)).load(table.uri(settings))

    window = pipeline.window.size_delta
    # Bronze is partitioned by event date: the date bounds prune it to the files of the range.
    bronze = at(tables.bronze, pins["bronze"]).where(in_bronze_span(pipeline, start, end + window))
    speed = at(tables.speed, pins["speed"]).where(in_window_range(start, end))
    return {
        RAW_EVENTS: (tables.bronze.qualified_name, pins["bronze"], bronze),
        BRONZE: (tables.bronze.qualified_name, pins["bronze"], bronze),
        GOLD: (tables.speed.qualified_name, pins["speed"], speed),
    }


def validate_audit(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    run_id: str,
    pins: dict[str, str],
    start: datetime,
    end: datetime,
    newest_event_time: datetime | None,
    expectations_dir: Path | None = None,
    record: bool = True,
) -> QualityResult:
    """Validate every suite the pipeline has, record the outcomes, and rebuild the Data Docs.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        run_id: the audit run the outcomes are recorded under.
        pins: the table versions the audit reads, by name.
        start: first window start of the range.
        end: end of the range (exclusive).
        newest_event_time: the newest event time the stream had read, for suites that bound times by it.
        expectations_dir: where the suite files are (default: the active project's).
        record: False to validate without writing ``audit.data_quality``.
    """
    context = gx_context(settings)
    outcomes: list[SuiteOutcome] = []
    validated: list[tuple] = []  # (suite, asset, run id) of each result, for its Data Docs page
    frames = audit_frames(spark, settings, pipeline, pins, start, end)
    for _, _, frame in frames.values():
        frame.persist()  # each suite computes dozens of metrics over the same rows
    for layer, (table, version, frame) in frames.items():
        path = suite_path(pipeline.name, layer, expectations_dir)
        if not path.exists():
            continue  # a pipeline without this suite: nothing to validate for the layer
        parameters = {}
        if layer == GOLD:
            parameters["fresh_since"] = freshness_floor(newest_event_time, load_suite(path))
        asset, suite_name = f"{pipeline.name}.{layer}", load_suite(path)["name"]
        result = validate_frame(context, path, asset, frame, parameters)
        validated.append((suite_name, asset, result.meta["run_id"]))
        outcomes.append(
            SuiteOutcome(
                suite=suite_name,
                table=table,
                table_version=version,
                success=bool(result.success),
                expectations=[_outcome(r) for r in result.results],
                page=validation_page(settings, suite_name, asset, result),
            )
        )
    for _, _, frame in frames.values():
        frame.unpersist()
    rebuild_docs(context, settings, validated)
    quality = QualityResult(outcomes, str(data_docs_dir(settings) / "index.html"))
    if record:
        record_quality(spark, settings, pipeline, run_id, quality)
    return quality


def record_quality(
    spark: SparkSession, settings: Settings, pipeline: Pipeline, run_id: str, quality: QualityResult
) -> None:
    """Append each expectation's outcome to ``audit.data_quality``, through delta-rs: the rows are on
    the driver already, and a Spark append of them took 1.0-2.1 s of an audit's 5-12 s of validation.

    Args:
        spark: the session to read and write with.
        settings: where the log, the tables and the checkpoints live.
        pipeline: the pipeline the rows belong to.
        run_id: the audit run the outcomes belong to.
        quality: the outcome of every suite.
    """
    ensure_table(DATA_QUALITY, settings)
    now = datetime.now(UTC)
    rows = [
        {
            "run_id": run_id,
            "pipeline": pipeline.name,
            "suite": suite.suite,
            "table_name": suite.table,
            "table_version": int(suite.table_version),
            "suite_success": suite.success,
            "expectation": e.name,
            "expectation_type": e.expectation_type,
            "success": e.success,
            "element_count": e.element_count,
            "unexpected_count": e.unexpected_count,
            "observed_value": e.observed,
            "data_docs": quality.data_docs,
            "validated_at": now,
        }
        for suite in quality.suites
        for e in suite.expectations
    ]
    if rows:
        append_rows(DATA_QUALITY.uri(settings), DATA_QUALITY.arrow_schema, rows, settings)


def render_quality(quality: QualityResult) -> str:
    lines = [f"data quality: {'all suites pass' if quality.ok else 'FAILED'}; Data Docs at {quality.data_docs}"]
    for suite in quality.suites:
        passed = sum(e.success for e in suite.expectations)
        lines.append(
            f"  {suite.suite:<28} {'pass' if suite.success else 'FAIL'}  {passed}/{len(suite.expectations)} "
            f"expectations on {suite.table}@v{suite.table_version}"
        )
        for failed in suite.failed:
            lines.append(f"    FAILED {failure_text(failed)} ({failed.expectation_type})")
    return "\n".join(lines)
