"""Reconciliation: every difference between the speed table and the raw log's truth is explained,
or reported as unexplained down to the event ids, and an audit re-run at its pins repeats itself."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from lakehouse.audit.reconcile import Auditor
from lakehouse.audit.report import gather_inputs, render_report
from lakehouse.cli import main
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.storage.archive import read_log
from lakehouse.storage.catalog import pipeline_tables
from lakehouse.storage.log import LogWriter, last_write, partition_uris
from tests.conftest import make_settings

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
START, END = datetime(2026, 1, 5, 8, 0), datetime(2026, 1, 5, 9, 0)
CONFIG = GeneratorConfig(
    events=2000,
    seed=21,
    rate=8.0,
    late_fraction=0.06,
    late_delay="3m",
    duplicate_fraction=0.03,
    malformed_fraction=0.02,
    events_per_file=400,
)


@pytest.fixture(scope="module")
def streamed_home(spark, tmp_path_factory):
    """A home whose speed layer drained the log file by file; tests copy it before changing it."""
    base = tmp_path_factory.mktemp("audit") / "base"
    settings = make_settings(base)
    generate(settings, CONFIG)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    return base


def malformed_records() -> int:
    """How many records the generator broke: each must be in quarantine under some reason."""
    from lakehouse.generator import generate_records

    return sum(n for kind, n in generate_records(CONFIG)[1].items() if kind.startswith("malformed:"))


def copy_of(streamed_home, tmp_path):
    """The whole home, log included: the audit matches log files by name, so a copy stays whole."""
    shutil.copytree(streamed_home, tmp_path / "copy")
    return make_settings(tmp_path / "copy")


def test_clean_run_explains_every_difference_by_late_events_exactly(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert result.unexplained == []
    assert result.explained["late"] > 0 and result.matched > 0
    assert result.windows_compared == result.matched + result.explained["late"]
    differences = spark.read.format("delta").load(f"{settings.warehouse_uri}/audit/reconciliation_differences")
    for row in differences.where(F.col("status") == "explained").collect():
        assert int(row.truth["vehicles"]) - int(row.speed["vehicles"]) == row.late_events
    inputs = gather_inputs(spark, settings, PIPELINE, result)
    page = render_report(result, inputs)
    assert "All differences explained" in page and f">{result.explained['late']}<" in page
    assert sum(inputs.quarantine_reasons.values()) == malformed_records() and "bad_json" in page
    for reason, count in inputs.quarantine_reasons.items():  # each bar's title, as Vega describes it
        assert f"<title>events: {count}; reason: {reason}</title>" in page
    delay_counts = re.findall(r"<title>events: (\d+); lag behind the frontier: [^<]+</title>", page)
    assert sum(map(int, delay_counts)) == len(inputs.late_delays_seconds) > 0
    late = spark.read.format("delta").load(TABLES.bronze.uri(settings)).where(F.col("fate") == "late")
    late_in_closed_windows = late.where(F.col("event_time") < F.lit(result.watermark - timedelta(minutes=1)))
    assert differences.agg(F.sum("late_events")).first()[0] >= late_in_closed_windows.count() > 0


def test_after_a_correction_run_late_differences_are_explained_as_already_corrected(spark, streamed_home, tmp_path):
    from lakehouse.layers.corrections import CorrectionRun

    settings = copy_of(streamed_home, tmp_path)
    CorrectionRun(spark, settings, PIPELINE).run()
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert result.unexplained == [] and result.explained["late"] > 0
    assert result.explained["corrected"] == result.explained["late"]
    assert "corrections" in result.pins


def test_after_a_correction_run_the_audit_of_the_serving_view_finds_no_difference(spark, streamed_home, tmp_path):
    from lakehouse.layers.corrections import CorrectionRun

    settings = copy_of(streamed_home, tmp_path)
    auditor = Auditor(spark, settings, PIPELINE)
    before = auditor.reconcile(START, END, target="serving")
    assert before.unexplained == [] and before.explained["late"] > 0  # served by speed until corrected
    CorrectionRun(spark, settings, PIPELINE).run()
    after = auditor.reconcile(START, END, target="serving")
    assert after.target == "serving" and after.unexplained == []
    assert after.matched == after.windows_compared == before.windows_compared > 0
    assert "batch" in {row["source"] for row in after.rows}  # the corrected windows


def write_straggler_into_a_corrected_window(spark, settings) -> dict:
    """One more late event, for a (window, key) the batch layer now serves, streamed into bronze."""
    corrected = (
        spark.read.format("delta")
        .load(TABLES.batch.uri(settings))
        .orderBy("window_start", "bridge_id", "vehicle_type")
        .first()
    )
    event_time = corrected.window_start + timedelta(seconds=30)
    straggler = {
        "event_id": "straggler-after-correction",
        "bridge_id": corrected.bridge_id,
        "booth_id": f"{corrected.bridge_id}-booth-0",
        "vehicle_type": corrected.vehicle_type,
        "axles": 2,
        "toll_amount": 7.25,
        "event_time": f"{event_time:%Y-%m-%dT%H:%M:%S}Z",
        "sent_at": f"{event_time:%Y-%m-%dT%H:%M:%S}Z",
    }
    LogWriter(settings, PIPELINE.name).write(datetime(2026, 1, 5, 9, 30), "straggler", [json.dumps(straggler)])
    run_speed_layer(spark, settings, PIPELINE, available_now=True)
    return {
        "window_start": corrected.window_start,
        "bridge_id": corrected.bridge_id,
        "vehicle_type": corrected.vehicle_type,
    }


def test_an_event_late_for_a_corrected_window_is_explained_as_arrived_after_the_batch(spark, streamed_home, tmp_path):
    from lakehouse.layers.corrections import CorrectionRun

    settings = copy_of(streamed_home, tmp_path)
    CorrectionRun(spark, settings, PIPELINE).run()
    window = write_straggler_into_a_corrected_window(spark, settings)
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END, target="serving")
    assert result.unexplained == []
    [row] = [r for r in result.rows if r["status"] != "matched"]
    assert (row["window_start"], row["key"]) == (
        window["window_start"],
        {"bridge_id": window["bridge_id"], "vehicle_type": window["vehicle_type"]},
    )
    assert (row["source"], row["causes"], row["after_batch_events"]) == ("batch", ["arrived_after_batch"], 1)
    assert Decimal(row["truth"]["revenue"]) - Decimal(row["speed"]["revenue"]) == Decimal("7.25")
    CorrectionRun(spark, settings, PIPELINE).run()  # the next correction folds it in
    again = Auditor(spark, settings, PIPELINE).reconcile(START, END, target="serving")
    assert again.matched == again.windows_compared


def test_a_batch_value_changed_by_hand_is_unexplained_in_the_serving_view(spark, streamed_home, tmp_path):
    from lakehouse.layers.corrections import CorrectionRun

    settings = copy_of(streamed_home, tmp_path)
    CorrectionRun(spark, settings, PIPELINE).run()
    batch = DeltaTable.forPath(spark, TABLES.batch.uri(settings))
    target = batch.toDF().orderBy("window_start", "bridge_id", "vehicle_type").first()
    batch.update(
        (F.col("window_start") == target.window_start)
        & (F.col("bridge_id") == target.bridge_id)
        & (F.col("vehicle_type") == target.vehicle_type),
        {"vehicles": F.col("vehicles") + 1},
    )
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END, target="serving")
    [row] = result.unexplained
    assert row["source"] == "batch" and row["key"]["bridge_id"] == target.bridge_id
    assert row["speed_minus_on_time"]["vehicles"] == "1" and row["unexplained_event_ids"] == []


def test_log_files_the_stream_has_not_read_are_explained_as_not_yet_read(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    generate(
        settings,
        GeneratorConfig(
            events=60,
            seed=99,
            rate=2.0,
            late_fraction=0,
            duplicate_fraction=0,
            malformed_fraction=0,
            events_per_file=60,
        ),
    )
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert result.unexplained == []
    assert result.explained["not_yet_read"] > 0


def test_a_bronze_row_deleted_after_the_stream_read_it_is_unexplained_with_its_event_id(
    spark, streamed_home, tmp_path, monkeypatch, capsys
):
    settings = copy_of(streamed_home, tmp_path)
    bronze = DeltaTable.forPath(spark, TABLES.bronze.uri(settings))
    victim = bronze.toDF().where("fate = 'on_time' AND event_time < '2026-01-05 08:02:00'").orderBy("event_id").first()
    bronze.delete(F.col("event_id") == victim.event_id)
    result = Auditor(spark, settings, PIPELINE).reconcile(START, END)
    assert [row["unexplained_event_ids"] for row in result.unexplained] == [[victim.event_id]]
    assert result.unexplained[0]["key"] == {"bridge_id": victim.bridge_id, "vehicle_type": victim.vehicle_type}

    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    report = tmp_path / "report.html"
    exit_code = main(
        [
            "audit",
            "--start",
            "2026-01-05T08:00Z",
            "--end",
            "2026-01-05T09:00Z",
            "--report",
            str(report),
            "--skip-quality",
        ]
    )
    assert exit_code == 1
    assert victim.event_id in capsys.readouterr().out
    page = report.read_text()
    assert "1 unexplained difference<" in page and victim.event_id in page and "<svg" in page


def add_a_cent_to_one_speed_row(spark, settings):
    """In the 08:01 window, closed by the fixture's watermark (about 08:02)."""
    speed = DeltaTable.forPath(spark, TABLES.speed.uri(settings))
    target = speed.toDF().where("window_start = '2026-01-05 08:01:00'").orderBy("bridge_id", "vehicle_type").first()
    condition = (
        (F.col("window_start") == target.window_start)
        & (F.col("bridge_id") == target.bridge_id)
        & (F.col("vehicle_type") == target.vehicle_type)
    )
    speed.update(condition, {"revenue": F.col("revenue") + F.lit(Decimal("0.01"))})
    return target


def test_a_speed_value_changed_by_hand_is_unexplained_by_the_amount_changed(
    spark, streamed_home, tmp_path, monkeypatch, capsys
):
    settings = copy_of(streamed_home, tmp_path)
    target = add_a_cent_to_one_speed_row(spark, settings)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    exit_code = main(["audit", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--skip-quality"])
    assert exit_code == 1
    unexplained = [line for line in capsys.readouterr().out.splitlines() if "UNEXPLAINED" in line]
    assert len(unexplained) == 1 and target.bridge_id in unexplained[0]
    assert (
        "value - events its layer counted {'vehicles': '0', 'revenue': '0.01'}; events unaccounted: []"
        in unexplained[0]
    )


def test_the_same_change_through_lakehouse_repair_is_explained_as_a_manual_change(
    spark, streamed_home, tmp_path, monkeypatch, capsys
):
    from lakehouse.storage.catalog import MANUAL_CHANGES

    settings = copy_of(streamed_home, tmp_path)
    speed = spark.read.format("delta").load(TABLES.speed.uri(settings))
    target = speed.where("window_start = '2026-01-05 08:01:00'").orderBy("bridge_id", "vehicle_type").first()
    where = (
        f"window_start = TIMESTAMP'2026-01-05 08:01:00' AND bridge_id = '{target.bridge_id}' "
        f"AND vehicle_type = '{target.vehicle_type}'"
    )
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    repair = ["repair", "--layer", "speed", "--where", where, "--set", "revenue = revenue + 0.01"]
    assert main([*repair, "--reason", "booth 3 undercharged", "--by", "ops-alice"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_changed"] == 1

    exit_code = main(["audit", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--skip-quality"])

    out = capsys.readouterr().out
    assert exit_code == 0 and "explained manual 1" in out and "UNEXPLAINED" not in out, out
    [recorded] = spark.read.format("delta").load(MANUAL_CHANGES.uri(settings)).collect()
    assert (recorded.changed_by, recorded.reason, recorded.table_name) == (
        "ops-alice",
        "booth 3 undercharged",
        "gold.toll_traffic__speed",
    )
    assert recorded.key == {"bridge_id": target.bridge_id, "vehicle_type": target.vehicle_type}


def test_a_repair_that_matches_no_row_changes_and_records_nothing(spark, streamed_home, tmp_path, monkeypatch, capsys):
    from lakehouse.storage.catalog import MANUAL_CHANGES, table_exists

    settings = copy_of(streamed_home, tmp_path)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    repair = ["repair", "--layer", "batch", "--where", "bridge_id = 'no-such-bridge'", "--delete"]

    assert main([*repair, "--reason", "test", "--by", "ops"]) == 2
    assert "matched no row of gold.toll_traffic__batch" in capsys.readouterr().err
    assert not table_exists(spark, MANUAL_CHANGES.uri(settings))


def test_incremental_audit_compares_only_windows_whose_speed_rows_changed(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    auditor = Auditor(spark, settings, PIPELINE)
    full = auditor.reconcile(START, END)
    unchanged = auditor.reconcile(START, END, incremental=True)
    assert (unchanged.mode, unchanged.changed_windows, unchanged.windows_compared) == ("incremental", 0, 0)

    target = add_a_cent_to_one_speed_row(spark, settings)
    changed = auditor.reconcile(START, END, incremental=True)
    keys_in_window = [r for r in full.rows if r["window_start"] == target.window_start]
    assert changed.changed_windows == 1
    assert {r["window_start"] for r in changed.rows} == {target.window_start}
    assert len(changed.rows) == len(keys_in_window) == changed.windows_compared
    assert [r["key"]["bridge_id"] for r in changed.unexplained] == [target.bridge_id]
    since = {"speed": unchanged.pins["speed"], "batch": unchanged.pins["batch"]}
    assert changed.changes_since == since
    recorded = (
        spark.read.format("delta")
        .load(f"{settings.warehouse_uri}/audit/reconciliations")
        .where(F.col("run_id") == changed.run_id)
        .first()
    )
    assert (recorded.mode, recorded.changes_since, recorded.pins["speed"]) == (
        "incremental",
        since,
        str(int(unchanged.pins["speed"]) + 1),
    )


def test_a_stream_that_stopped_fails_freshness_and_the_audit_with_data_docs(
    spark, streamed_home, tmp_path, monkeypatch, capsys
):
    settings = copy_of(streamed_home, tmp_path)
    generate(
        settings,
        GeneratorConfig(
            events=60,
            seed=5,
            start=datetime(2026, 1, 5, 8, 30, tzinfo=UTC),
            rate=2.0,
            late_fraction=0,
            duplicate_fraction=0,
            malformed_fraction=0,
            events_per_file=60,
        ),
    )
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    report = tmp_path / "report.html"
    exit_code = main(["audit", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--report", str(report)])
    out = capsys.readouterr().out
    assert exit_code == 1
    assert "unexplained      0" in out and re.search(
        r"FAILED fresh: observed 2026-01-05.08:05:00.* \(expect_column_max_to_be_between\)", out
    )
    outcomes = spark.read.format("delta").load(f"{settings.warehouse_uri}/audit/data_quality").collect()
    assert {(r.suite, r.expectation) for r in outcomes if not r.success} == {("toll_traffic.gold", "fresh")}
    assert {r.suite for r in outcomes} == {"toll_traffic.raw_events", "toll_traffic.bronze", "toll_traffic.gold"}
    page = report.read_text()
    assert "Data quality: suite failed" in page and "All differences explained" in page
    docs_link = re.search(r'href="([^"]+)">Open the Great Expectations Data Docs', page).group(1)
    docs_index = (report.parent / docs_link).resolve()
    assert (
        docs_index == tmp_path / "copy" / "data_docs" / "index.html" and "toll_traffic.gold" in docs_index.read_text()
    )
    gold_page = re.search(r'<a href="([^"]+)">toll_traffic.gold</a>', page).group(1)
    assert "Status: Failed" in " ".join(re.sub(r"<[^>]+>", " ", (report.parent / gold_page).read_text()).split())
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copy(report, artifacts / "audit-report-stale-stream.html")  # for a look in a browser


def test_log_pins_and_reads_cover_only_the_ingest_hours_that_can_hold_the_range(spark, tmp_path):
    settings = make_settings(tmp_path / "home")
    writer = LogWriter(settings, PIPELINE.name)
    early = writer.write(datetime(2026, 1, 4, 10, 0), "a", ['{"n": 1}'])
    late = writer.write(datetime(2026, 1, 5, 8, 0), "b", ['{"n": 2}'])
    cut = datetime(2026, 1, 5, 7, 0)
    assert [uri.rstrip("/").rsplit("/", 2)[-2:] for uri in partition_uris(spark, settings, PIPELINE.name, cut)] == [
        ["ingest_date=2026-01-05", "ingest_hour=08"]
    ]
    newest_ms = local_path(late).stat().st_mtime_ns // 1_000_000
    assert last_write(spark, settings, PIPELINE.name, cut) == datetime(1970, 1, 1) + timedelta(milliseconds=newest_ms)
    assert last_write(spark, settings, PIPELINE.name) == last_write(spark, settings, PIPELINE.name, cut)
    assert [r.value for r in read_log(spark, settings, PIPELINE.name, cut).collect()] == ['{"n": 2}']
    assert sorted(r.value for r in read_log(spark, settings, PIPELINE.name).collect()) == ['{"n": 1}', '{"n": 2}']
    pinned = read_log(spark, settings, PIPELINE.name, cut).where(
        F.col("written_at") <= F.lit(last_write(spark, settings, PIPELINE.name, cut).isoformat()).cast("timestamp")
    )
    assert pinned.count() == 1 and local_path(early).exists()


def test_audit_at_its_pins_repeats_itself_after_more_data_arrives(spark, streamed_home, tmp_path):
    settings = copy_of(streamed_home, tmp_path)
    auditor = Auditor(spark, settings, PIPELINE)
    first = auditor.reconcile(START, END)
    generate(
        settings,
        GeneratorConfig(events=300, seed=77, rate=8.0, late_fraction=0.5, late_delay="2m", events_per_file=100),
    )
    again = auditor.reconcile(START, END, pins=first.pins)
    fresh = auditor.reconcile(START, END)
    assert (again.windows_compared, again.matched, again.explained, again.unexplained, again.watermark) == (
        first.windows_compared,
        first.matched,
        first.explained,
        first.unexplained,
        first.watermark,
    )
    assert fresh.pins != first.pins and fresh.explained["not_yet_read"] > 0


def offline_only(context) -> list[str]:
    """Abort every request but to a file or to loopback, as with no network; the list gathers them."""
    aborted: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith("file:") or re.match(r"https?://(127\.0\.0\.1|localhost)[:/]", url):
            return request_route.continue_()
        aborted.append(url)
        return request_route.abort()

    context.route("**/*", route)
    return aborted


def styled(page, selector: str, prop: str) -> str:
    return page.locator(selector).first.evaluate(f"e => getComputedStyle(e).{prop}")


def test_the_report_and_its_data_docs_read_in_a_browser_with_no_network(spark, streamed_home, tmp_path, monkeypatch):
    """The page a person opens, with every request off the machine aborted: the verdicts and the
    Vega-drawn charts render (the per-window one on the first screen), and the Data Docs it links
    to show Bootstrap's and Font Awesome's styles from their local copies.
    Screenshots: test-artifacts/audit-report.png, test-artifacts/data-docs-offline.png."""
    from playwright.sync_api import expect, sync_playwright

    copy_of(streamed_home, tmp_path)
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path / "copy"))
    report = tmp_path / "report.html"
    assert main(["audit", "--start", "2026-01-05T08:00Z", "--end", "2026-01-05T09:00Z", "--report", str(report)]) == 0
    artifacts = Path(__file__).resolve().parent.parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1100, "height": 900})
            aborted = offline_only(context)
            page = context.new_page()
            page.goto(report.as_uri())
            verdicts = page.locator(".verdict")
            assert verdicts.all_inner_texts() == ["All differences explained", "Data quality: all suites pass"]
            chart = page.locator("#windows-chart svg").bounding_box()
            assert chart is not None and chart["y"] < 900 and chart["width"] > 500  # starts on the first screen
            late_points = page.locator('#windows-chart [aria-roledescription="point"]').count()
            assert (
                late_points > 0
                and page.locator('#differences-chart [aria-roledescription="bar"]').count() == late_points
            )
            assert page.locator('#quarantine-chart [aria-roledescription="bar"]').count() >= 1
            assert page.locator('svg text:text-is("window start (UTC)")').count() == 2  # the axes Vega-Lite drew
            page.screenshot(path=str(artifacts / "audit-report.png"), full_page=True)
            docs = page.get_by_role("link", name="Data Docs").first.get_attribute("href")
            page.goto((report.parent / docs).resolve().as_uri())
            page.wait_for_load_state("load")
            assert styled(page, "nav.navbar", "display") == "flex"  # Bootstrap's stylesheet (unstyled: block)
            # bootstrap-table draws its tables again once its script has run, replacing their icons: an
            # icon read before then can be detached (no computed style), so wait for the table first,
            # and let the check retry on the icons that stay.
            expect(page.locator(".bootstrap-table").first).to_be_attached()  # jQuery and bootstrap-table ran
            expect(page.locator(".fas").first).to_have_css("font-family", re.compile("Font Awesome 6 Free"))
            page.screenshot(path=str(artifacts / "data-docs-offline.png"), full_page=True)
            assert aborted == []
        finally:
            browser.close()


def test_each_audit_renders_its_own_data_docs_pages_and_the_index_not_the_earlier_ones(spark, tmp_path):
    """Data Docs built per audit: this audit's results and the index are written (and read offline),
    an earlier audit's page is not rendered again, and the index lists both."""
    from lakehouse.audit import quality

    settings = make_settings(tmp_path / "home")
    context = quality.gx_context(settings)
    suite = Path(__file__).resolve().parent.parent / "expectations" / "toll_traffic.bronze.json"
    frame = spark.createDataFrame([("e1", "bridge-01")], "event_id string, bridge_id string")
    pages = []
    for _ in range(2):
        result = quality.validate_frame(context, suite, "toll_traffic.bronze", frame)
        quality.rebuild_docs(context, settings, [("toll_traffic.bronze", "toll_traffic.bronze", result.meta["run_id"])])
        pages.append(Path(quality.validation_page(settings, "toll_traffic.bronze", "toll_traffic.bronze", result)))
        if len(pages) == 1:
            first_written = pages[0].stat().st_mtime_ns
            os.utime(pages[0], ns=(first_written - 10**10, first_written - 10**10))  # as if written 10 s before
    assert pages[0].stat().st_mtime_ns == first_written - 10**10  # not rendered again
    index = (quality.data_docs_dir(settings) / "index.html").read_text()
    for page in pages:
        assert "static/vendor/bootstrap.min.css" in page.read_text() and "bootstrapcdn" not in page.read_text()
        assert page.relative_to(quality.data_docs_dir(settings)).as_posix() in index
    assert "bootstrapcdn" not in index


def test_the_data_docs_drop_results_older_than_their_retention(spark, tmp_path):
    """A result stored 2025-01-01 is past the 90 days the Data Docs keep: the next audit's build
    deletes it and its page, and its index no longer lists it; the audit's own result stays."""
    from lakehouse.audit import quality

    settings = make_settings(tmp_path / "home")
    context = quality.gx_context(settings)
    suite = Path(__file__).resolve().parent.parent / "expectations" / "toll_traffic.bronze.json"
    frame = spark.createDataFrame([("e1", "bridge-01")], "event_id string, bridge_id string")
    old = quality.validate_frame(context, suite, "toll_traffic.bronze", frame)
    stored = next(quality.validation_store(settings).rglob("*.json"))
    document = json.loads(stored.read_text())
    document["meta"]["run_id"]["run_time"] = "2025-01-01T00:00:00+00:00"
    aged = stored.parent.parent / "20250101T000000.000000Z" / stored.name
    aged.parent.mkdir()
    aged.write_text(json.dumps(document))
    stored.unlink()
    context.build_data_docs(site_names=[quality.DOCS_SITE])  # the aged result's page, as its audit left it
    aged_page = quality.data_docs_dir(settings) / "validations" / aged.relative_to(quality.validation_store(settings))
    aged_page = aged_page.with_suffix(".html")
    assert aged_page.exists() and old.success is not None
    new = quality.validate_frame(context, suite, "toll_traffic.bronze", frame)
    quality.rebuild_docs(context, settings, [("toll_traffic.bronze", "toll_traffic.bronze", new.meta["run_id"])])
    assert not aged.exists() and not aged_page.exists() and not aged.parent.exists()
    index = (quality.data_docs_dir(settings) / "index.html").read_text()
    assert "20250101T000000" not in index
    page = quality.validation_page(settings, "toll_traffic.bronze", "toll_traffic.bronze", new)
    assert Path(page).relative_to(quality.data_docs_dir(settings)).as_posix() in index


# --- session windows: the comparison on inline data -------------------------------------------------
# team_scores_sessions: a 1-minute gap, per user. Each user is one case; the range is [12:00, 12:10)
# and the watermark 12:09:30, so a group is compared when it ends by 12:08:30.

SESSIONS = get_pipeline("team_scores_sessions")
CAUSED = "event_id string, user string, team string, score int, event_time timestamp, cause string"
SESSION_ROWS = "user string, window_start timestamp, window_end timestamp, total_score bigint"
LISTED = "window_start timestamp, window_end timestamp, _key_json string"


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 5, 12, minute, second)


def event(event_id: str, user: str, moment: datetime, score: int, cause: str = "on_time") -> tuple:
    return (event_id, user, "red", score, moment, cause)


SESSION_EVENTS = [
    # alice's 2 is late and bridges her two on-time sessions: the truth has one.
    event("a1", "alice", at(0), 5),
    event("a2", "alice", at(0, 40), 3),
    event("a3", "alice", at(2, 30), 4),
    event("a4", "alice", at(1, 35), 2, cause="late"),
    event("b1", "bob", at(0, 20), 6),  # matched
    event("c1", "carol", at(4), 7),  # her session's value was changed by hand
    event("d1", "dave", at(5), 1),  # the stream split what 30 s apart joins
    event("d2", "dave", at(5, 30), 2),
    event("e1", "erin", at(3), 9, cause="missing"),  # read by the stream, lost by bronze
    event("f1", "frank", at(8), 1),  # ends 12:09: the stream can still extend it
    event("g1", "gina", at(6), 1, cause="not_yet_read"),  # a log file the stream has not read
    event("h1", "hank", at(6, 30), 3),  # changed by hand, through `lakehouse repair`
    event("i1", "ivy", at(1), 1),  # a late event a correction run has folded in
    event("i2", "ivy", at(1, 30), 2, cause="late"),
    event("j1", "jack", datetime(2026, 1, 5, 11, 59, 30), 1),  # his session starts before the range
    event("j2", "jack", at(0, 10), 1),
]
STREAMED_SESSIONS = [
    ("alice", at(0), at(1, 40), 8),
    ("alice", at(2, 30), at(3, 30), 4),
    ("bob", at(0, 20), at(1, 20), 6),
    ("carol", at(4), at(5), 8),
    ("dave", at(5), at(6), 1),
    ("dave", at(5, 30), at(6, 30), 2),
    ("frank", at(8), at(9), 1),
    ("hank", at(6, 30), at(7, 30), 4),
    ("ivy", at(1), at(2), 1),
]
# What audit.corrections and audit.manual_changes list: a session of a key, as it was recomputed or changed.
CORRECTED_SESSIONS = [(at(1), at(2, 30), '{"user":"ivy"}')]
REPAIRED_SESSIONS = [(at(6, 30), at(7, 30), '{"user":"hank"}')]


@pytest.fixture(scope="module")
def judged_sessions(spark) -> dict[str, dict]:
    """Each user's row, from the comparison the audit runs on session windows."""
    from lakehouse.audit import sessions
    from lakehouse.dataflow import transforms as tx
    from tests.frames import inline_frame

    caused = tx.assign_windows(inline_frame(spark, CAUSED, SESSION_EVENTS), SESSIONS)
    audited = inline_frame(spark, SESSION_ROWS, STREAMED_SESSIONS)
    groups = sessions.session_groups(caused, audited, SESSIONS, at(0), at(10))
    for flag, rows in (("corrected", CORRECTED_SESSIONS), ("manually_changed", REPAIRED_SESSIONS)):
        groups = sessions.flagged_by_overlap(groups, inline_frame(spark, LISTED, rows), flag, SESSIONS)
    closed = groups.where(sessions.closed(at(9, 30), SESSIONS))
    return {row.key["user"]: row.asDict(recursive=True) for row in sessions.verdicts(closed, SESSIONS).collect()}


def test_a_late_event_that_merges_two_stream_sessions_is_explained_as_late(judged_sessions):
    alice = judged_sessions["alice"]
    assert (alice["status"], alice["causes"], alice["late_events"]) == ("explained", ["late"], 1)
    assert (alice["window_start"], alice["window_end"]) == (at(0), at(3, 30))  # the group: both of hers
    assert (alice["truth"], alice["speed"], alice["speed_minus_on_time"]) == (
        {"total_score": "14"},
        {"total_score": "12"},
        {"total_score": "0"},
    )
    assert judged_sessions["bob"]["status"] == "matched" and judged_sessions["gina"]["causes"] == ["not_yet_read"]


def test_a_session_changed_by_hand_or_split_differently_or_losing_an_event_is_unexplained(judged_sessions):
    carol, dave, erin = (judged_sessions[user] for user in ("carol", "dave", "erin"))
    assert (carol["status"], carol["speed_minus_on_time"]) == ("unexplained", {"total_score": "1"})
    # Same total, other bounds: the stream's two sessions are not the one its own events make.
    assert (dave["status"], dave["truth"], dave["speed"]) == ("unexplained", {"total_score": "3"}, {"total_score": "3"})
    assert (erin["status"], erin["unexplained_event_ids"]) == ("unexplained", ["e1"])
    assert "frank" not in judged_sessions  # open: compared once the watermark is a gap past its end
    assert "jack" not in judged_sessions  # the range before holds it


def test_a_recorded_repair_explains_the_sessions_it_overlaps_and_corrections_are_named(judged_sessions):
    hank, ivy = judged_sessions["hank"], judged_sessions["ivy"]
    assert (hank["status"], hank["causes"], hank["speed_minus_on_time"]) == (
        "explained",
        ["manual_change"],
        {"total_score": "1"},
    )
    assert (ivy["status"], ivy["causes"]) == ("explained", ["late", "corrected"])
