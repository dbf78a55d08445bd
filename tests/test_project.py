"""A team's project: init makes a valid one, check names every error by file, line and field, the
shipped examples go through the same door, and each pipeline's definition has its own fingerprint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse.project.project import load_project
from lakehouse.project.scaffold import make_project
from lakehouse.project.yaml_source import ProjectError
from lakehouse.settings import PROJECT_ROOT

PIPELINE = """\
fields:
  event_id: string
  sensor: string
  celsius: {kind: decimal, precision: 5, scale: 2}
  event_time: timestamp
keys: [sensor]
window: {size: 10m, slide: 1m}
metrics:
  readings: count
  total: {sum: celsius}
  coldest: {min: celsius}
  warmest: {max: celsius}
  mean: {mean: {sum: total, count: readings}}
watermark_delay: 2m
"""
SUITE = {
    "name": "sensors.raw_events",
    "expectations": [
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "celsius", "min_value": -90, "max_value": 60},
            "meta": {"reason": "implausible_temperature"},
        }
    ],
}


def project_with(root: Path, pipeline: str = PIPELINE, suite: dict = SUITE, name: str = "sensors") -> Path:
    (root / "pipelines").mkdir(parents=True)
    (root / "expectations").mkdir()
    (root / "lakehouse.yaml").write_text("name: test\n")
    (root / "pipelines" / f"{name}.yaml").write_text(pipeline)
    (root / "expectations" / f"{name}.raw_events.json").write_text(json.dumps(suite, indent=2))
    return root


def problems(root: Path) -> list[str]:
    with pytest.raises(ProjectError) as raised:
        load_project(root)
    return [str(p).removeprefix(f"{root}/") for p in raised.value.problems]


def test_init_makes_a_project_that_validates_with_every_metric_kind(tmp_path):
    project = make_project(tmp_path / "team")
    spec = project.pipelines["page_views"]
    assert {m.kind.value for m in spec.metrics} == {"count", "sum", "min", "max", "approx_distinct", "mean"}
    assert (project.root / "events" / "page_views.jsonl").read_text().count("\n") > 100
    with pytest.raises(Exception, match="not empty"):
        make_project(tmp_path / "team")


def test_a_declared_pipeline_reads_as_declared(tmp_path):
    spec = load_project(project_with(tmp_path)).pipelines["sensors"]
    assert spec.keys == ("sensor",) and spec.window.kind == "hopping" and spec.topic == "sensors"
    assert [(m.name, m.kind, m.field) for m in spec.metrics][:4] == [
        ("readings", "count", None),
        ("total", "sum", "celsius"),
        ("coldest", "min", "celsius"),
        ("warmest", "max", "celsius"),
    ]
    assert spec.metrics[4].mean_of == ("total", "readings")
    counted = load_project(project_with(tmp_path / "counted", PIPELINE.replace("{max: celsius}", "{count: celsius}")))
    assert [(m.kind, m.field) for m in counted.pipelines["sensors"].metrics if m.name == "warmest"] == [
        ("count", "celsius")
    ]
    assert spec.field("celsius").precision == 5 and spec.field("celsius").scale == 2


@pytest.mark.parametrize(
    "change, expected",
    [
        (("sensor: string", "sensor: strng"), "pipelines/sensors.yaml:3: fields.sensor: unknown kind 'strng'"),
        (("keys: [sensor]", "keys: [sensor, site]"), "pipelines/sensors.yaml:6: keys.1: 'site' is not a field"),
        (
            ("{sum: celsius}", "{sum: celcius}"),
            "pipelines/sensors.yaml:10: metrics.total.sum: 'celcius' is not a field",
        ),
        (
            ("watermark_delay: 2m", "watermark_delay: 2 minutes"),
            "pipelines/sensors.yaml:14: watermark_delay: cannot read",
        ),
        (("window: {size: 10m, slide: 1m}", "window: {slide: 1m}"), "pipelines/sensors.yaml:7: window: a window has"),
        (("{min: celsius}", "{min: sensor}"), "pipelines/sensors.yaml:11: metrics.coldest.min: min needs a number"),
        (
            ("count: readings}", "count: total}"),
            "pipelines/sensors.yaml:13: metrics.mean.mean.count: must name a count",
        ),
        (("  readings: count", "  readings: median"), "pipelines/sensors.yaml:9: metrics.readings: unknown kind"),
        (("{max: celsius}", "{count: celcius}"), "pipelines/sensors.yaml:12: metrics.warmest.count: 'celcius' is not"),
        (  # the speed table's partition column
            ("  readings: count", "  window_hour: count"),
            "pipelines/sensors.yaml:9: metrics.window_hour: 'window_hour' is already a key or a column",
        ),
    ],
)
def test_check_names_the_file_line_and_field_of_each_error(tmp_path, change, expected):
    found = problems(project_with(tmp_path, PIPELINE.replace(*change)))
    assert any(p.startswith(expected) for p in found), found


def test_a_custom_metric_names_a_decorated_function_of_the_projects_metrics_module(tmp_path):
    declared = PIPELINE.replace("  readings: count", "  readings: count\n  heavy: {custom: heavy}")
    root = project_with(tmp_path, declared)
    expected = "pipelines/sensors.yaml:10: metrics.heavy.custom: no @metric function 'heavy' in pipelines/metrics.py"
    assert problems(root) == [expected]
    (root / "pipelines" / "metrics.py").write_text("@metric(merge='sum', type='bigint')\ndef heavy():\n    pass\n")
    assert [m.kind for m in load_project(root).pipelines["sensors"].metrics][1] == "custom"


def test_a_suite_rule_on_an_unknown_column_is_named_by_its_line(tmp_path):
    suite = json.loads(json.dumps(SUITE))
    suite["expectations"][0]["kwargs"]["column"] = "celcius"
    found = problems(project_with(tmp_path, suite=suite))
    assert found == [
        "expectations/sensors.raw_events.json:7: expectations.0.kwargs.column: 'celcius' is not a field of sensors"
    ]


def test_check_reports_every_problem_at_once_and_yaml_errors_by_line(tmp_path):
    root = project_with(tmp_path, PIPELINE.replace("sensor: string", "sensor: strng").replace("2m", "soon"))
    assert len(problems(root)) == 2
    (root / "pipelines" / "broken.yaml").write_text("fields:\n  a: [unclosed\n")
    assert any(p.startswith("pipelines/broken.yaml:3: not valid YAML") for p in problems(root))


def test_check_runs_without_a_jvm_in_well_under_two_seconds(tmp_path):
    root = project_with(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")} | {"LAKEHOUSE_PROJECT": str(root)}
    began = time.monotonic()
    ok = subprocess.run([sys.executable, "-m", "lakehouse.cli", "check"], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and "1 pipelines valid (sensors)" in ok.stdout and time.monotonic() - began < 2
    (root / "pipelines" / "sensors.yaml").write_text(PIPELINE.replace("keys: [sensor]", "keys: [site]"))
    bad = subprocess.run([sys.executable, "-m", "lakehouse.cli", "check"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "sensors.yaml:6: keys.0: 'site' is not a field" in bad.stderr


def test_the_shipped_examples_are_a_project_like_any_other():
    project = load_project(PROJECT_ROOT)
    assert len(project.pipelines) == 9 and set(project.window_joins) == {"toll_weather"}
    trips = project.pipelines["toll_trips"]
    assert trips.topic == "toll_traffic" and trips.suite == "toll_traffic" and trips.field("plate_hash").required
    assert not project.pipelines["toll_traffic"].field("plate_hash").required


def test_a_change_to_one_pipeline_changes_its_fingerprint_only(tmp_path):
    root = project_with(tmp_path)
    (root / "pipelines" / "other.yaml").write_text(PIPELINE)
    (root / "expectations" / "other.raw_events.json").write_text(json.dumps(SUITE))
    before = {n: s.definition_digest for n, s in load_project(root).pipelines.items()}
    time.sleep(0.01)  # a new modification time: the project is read again
    (root / "pipelines" / "other.yaml").write_text(PIPELINE.replace("{max: celsius}", "{min: celsius}"))
    after = {n: s.definition_digest for n, s in load_project(root).pipelines.items()}
    assert after["sensors"] == before["sensors"] and after["other"] != before["other"]


def test_airflow_lists_a_pipeline_added_to_the_project_at_its_next_parse(tmp_path):
    from lakehouse.ops.orchestration import backfill_param_schemas, pipeline_names
    from lakehouse.settings import Settings

    root = project_with(tmp_path)
    settings = Settings.from_env({"LAKEHOUSE_PROJECT": str(root)})
    assert pipeline_names(settings) == ["sensors"]
    (root / "pipelines" / "more.yaml").write_text("extends: sensors\nkeys: []\n")
    assert pipeline_names(settings) == ["more", "sensors"]
    assert backfill_param_schemas(settings)["pipeline"]["enum"] == ["more", "sensors"]


def test_ingest_appends_lines_whole_to_the_pipelines_log_and_refuses_an_unknown_pipeline(tmp_path):
    root = project_with(tmp_path / "project")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEHOUSE_")}
    env |= {"LAKEHOUSE_PROJECT": str(root), "LAKEHOUSE_HOME": str(tmp_path / "home")}
    lines = [json.dumps({"event_id": f"e{i}", "sensor": "s", "celsius": 1.5}) for i in range(25)]
    command = [sys.executable, "-m", "lakehouse.cli", "ingest", "--pipeline", "sensors", "-"]
    done = subprocess.run(command, input="\n".join(lines) + "\n\n", env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "ingested 25 lines into the log of sensors" in done.stdout, done.stderr
    [written] = (tmp_path / "home" / "log" / "sensors").glob("ingest_date=*/ingest_hour=*/*Z-ingest-*.jsonl")
    assert written.read_text().splitlines() == lines
    assert not list((tmp_path / "home" / "log" / "sensors" / "_incoming").iterdir())  # renamed in, none left
    unknown = subprocess.run([*command[:-2], "nope", "-"], input="{}", env=env, capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown pipeline 'nope'" in unknown.stderr
    missing = subprocess.run([*command[:-1], str(tmp_path / "none.jsonl")], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def documented_project_files() -> dict[str, str]:
    """The files of docs/pipelines.md's reference project, each the code block after its marker."""
    text = (PROJECT_ROOT / "docs" / "pipelines.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- project file: (\S+) -->\n```\w+\n(.*?)```", text, re.DOTALL)
    return dict(blocks)


def test_the_reference_project_in_the_docs_validates_as_written(tmp_path):
    files = documented_project_files()
    assert set(files) == {"lakehouse.yaml", "pipelines/payments.yaml", "expectations/payments.raw_events.json"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    project = load_project(tmp_path)
    payments = project.pipelines["payments"]
    assert (payments.event_id, payments.event_time) == ("payment_id", "paid_at")
    assert [
        rule["meta"]["reason"] for rule in json.loads(files["expectations/payments.raw_events.json"])["expectations"]
    ]
    assert set(project.dimensions) == {"merchants"}
    assert project.default_pipeline == "payments"


def test_a_pipeline_without_its_suite_file_is_refused_and_an_empty_suite_passes(tmp_path):
    root = project_with(tmp_path)
    suite = root / "expectations" / "sensors.raw_events.json"
    suite.unlink()
    assert problems(root) == ["expectations/sensors.raw_events.json: no such file"]
    suite.write_text(json.dumps({"name": "sensors.raw_events", "expectations": []}))
    assert load_project(root).pipelines["sensors"].suite == "sensors"


def several_pipelines(root: Path, project_file: str = "name: test\n") -> Path:
    """A project of two pipelines: ``sensors`` and ``hourly``, the same readings in hourly windows."""
    project_with(root)
    (root / "lakehouse.yaml").write_text(project_file)
    (root / "pipelines" / "hourly.yaml").write_text("extends: sensors\nwindow: {size: 1h}\n")
    return root


def run_cli(monkeypatch, root: Path, home: Path, *argv: str) -> int:
    from lakehouse.cli import main

    monkeypatch.setenv("LAKEHOUSE_PROJECT", str(root))
    monkeypatch.setenv("LAKEHOUSE_HOME", str(home))
    return main(list(argv))


def test_status_without_a_pipeline_has_a_section_for_each_pipeline_of_the_project(tmp_path, monkeypatch, capsys):
    root = several_pipelines(tmp_path / "project")
    assert run_cli(monkeypatch, root, tmp_path / "home", "status") == 0
    sections = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pipeline ")]
    assert [line.split(":")[0] for line in sections] == ["pipeline hourly", "pipeline sensors"]


def test_a_command_on_one_pipeline_asks_which_when_the_project_has_several_and_names_no_default(
    tmp_path, monkeypatch, capsys
):
    root = several_pipelines(tmp_path / "project")
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"event_id": "e1", "sensor": "s", "celsius": 1.5}) + "\n")
    for argv in (("ingest", str(events)), ("health",), ("correct",)):
        assert run_cli(monkeypatch, root, tmp_path / "home", *argv) == 2, argv
        assert capsys.readouterr().err.splitlines() == [
            "lakehouse: error: the project has 2 pipelines (hourly, sensors): name one with --pipeline, "
            "or declare default_pipeline in lakehouse.yaml"
        ]
    assert not (tmp_path / "home").exists()  # nothing written


def test_the_default_pipeline_lakehouse_yaml_declares_is_what_a_command_on_one_pipeline_runs(tmp_path, monkeypatch):
    from lakehouse.ops.orchestration import backfill_param_schemas
    from lakehouse.settings import Settings

    root = several_pipelines(tmp_path / "project", "name: test\ndefault_pipeline: sensors\n")
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"event_id": "e1", "sensor": "s", "celsius": 1.5}) + "\n")
    assert run_cli(monkeypatch, root, tmp_path / "home", "ingest", str(events)) == 0
    assert [p.name for p in (tmp_path / "home" / "log").iterdir()] == ["sensors"]
    settings = Settings.from_env({"LAKEHOUSE_PROJECT": str(root)})
    assert backfill_param_schemas(settings)["pipeline"]["default"] == "sensors"  # the trigger form's choice
    (root / "lakehouse.yaml").write_text("name: test\n")
    assert "default" not in backfill_param_schemas(settings)["pipeline"]  # none: the form asks
    (root / "lakehouse.yaml").write_text("name: test\ndefault_pipeline: daily\n")
    assert problems(root) == ["lakehouse.yaml:2: default_pipeline: 'daily' is not a pipeline of this project"]
