"""Durations, URIs and environment-driven settings: plain Python, no Spark."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.eventtime import format_duration, parse_duration
from lakehouse.location import local_path, to_uri
from lakehouse.settings import PROJECT_ROOT, Settings, parse_size

# --- parse_duration / format_duration -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0s", timedelta(0)),
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("1d", timedelta(days=1)),
        (" 2m ", timedelta(minutes=2)),
    ],
)
def test_parse_duration_reads_every_unit(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "m", "1.5h", "-1s", "5 minutes", "1w", "5M", "1h30m", "250ms"])
def test_parse_duration_rejects_unreadable_text_with_an_example_of_the_format(text):
    with pytest.raises(LakehouseError) as error:
        parse_duration(text)
    assert str(error.value) == f"cannot read duration {text!r}: write it like 0s, 90s, 5m, 1h or 1d"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(minutes=90), "90m"),
        (timedelta(hours=1), "1h"),
        (timedelta(hours=36), "36h"),
        (timedelta(days=1), "1d"),
        (timedelta(days=2), "2d"),
    ],
)
def test_format_duration_uses_the_largest_unit_that_divides_exactly(value, expected):
    assert format_duration(value) == expected


@pytest.mark.parametrize("text", ["0s", "45s", "90s", "5m", "2h", "1d"])
def test_format_duration_reads_back_to_the_same_duration(text):
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


# --- to_uri / local_path ---------------------------------------------------------------------------


def test_to_uri_turns_an_absolute_local_path_into_a_hadoop_file_uri(tmp_path):
    folder = tmp_path.resolve() / "home"
    assert to_uri(folder) == f"file:{folder}"


def test_to_uri_resolves_a_relative_path_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert to_uri("data/home") == f"file:{tmp_path.resolve()}/data/home"


def test_to_uri_normalises_a_triple_slash_file_uri_to_hadoops_single_slash_form(tmp_path):
    folder = tmp_path.resolve() / "home"
    assert to_uri(f"file://{folder}") == f"file:{folder}"


def test_to_uri_leaves_a_single_slash_file_uri_unchanged(tmp_path):
    uri = f"file:{tmp_path.resolve()}/home"
    assert to_uri(uri) == uri


def test_to_uri_passes_an_object_store_uri_through_without_its_trailing_slash():
    assert to_uri("s3a://bucket/lakehouse/") == "s3a://bucket/lakehouse"


def test_to_uri_keeps_an_object_store_uri_as_given():
    assert to_uri("s3a://bucket/lakehouse/warehouse") == "s3a://bucket/lakehouse/warehouse"


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "{p}"])
def test_local_path_reads_every_local_form_to_the_same_path(tmp_path, form):
    folder = tmp_path.resolve() / "home"
    assert local_path(form.format(p=folder)) == folder


def test_local_path_refuses_an_object_store_uri():
    with pytest.raises(LakehouseError, match=r"^s3a://bucket/log is not on the local file system$"):
        local_path("s3a://bucket/log")


# --- Settings.from_env -----------------------------------------------------------------------------


def test_settings_derive_every_location_from_lakehouse_home(tmp_path):
    home = tmp_path.resolve() / "home"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
    assert (settings.home, settings.log_uri, settings.warehouse_uri, settings.checkpoint_uri) == (
        f"file:{home}",
        f"file:{home}/log",
        f"file:{home}/warehouse",
        f"file:{home}/checkpoints",
    )


def test_settings_without_overrides_take_the_documented_defaults(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    assert (
        settings.spark_master,
        settings.shuffle_partitions,
        settings.driver_memory,
        settings.trigger_interval,
        settings.max_files_per_trigger,
        settings.dedupe_horizon,
        settings.watermark_delay,
        settings.allowed_lateness,
        settings.extra_packages,
    ) == ("local[2]", 4, "2g", "5s", 0, "1h", None, None, ())


def test_settings_without_lakehouse_home_live_in_the_checkouts_dot_lakehouse_folder():
    settings = Settings.from_env({})
    assert settings.home == f"file:{PROJECT_ROOT / '.lakehouse'}"


def test_settings_read_from_an_explicit_env_ignore_the_process_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "local[8]")
    assert Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)}).spark_master == "local[2]"


@pytest.mark.parametrize(
    ("variable", "value", "attribute", "expected"),
    [
        ("LAKEHOUSE_LOG_URI", "s3a://bucket/log/", "log_uri", "s3a://bucket/log"),
        ("LAKEHOUSE_WAREHOUSE_URI", "s3a://bucket/warehouse", "warehouse_uri", "s3a://bucket/warehouse"),
        ("LAKEHOUSE_CHECKPOINT_URI", "s3a://bucket/checkpoints", "checkpoint_uri", "s3a://bucket/checkpoints"),
        ("LAKEHOUSE_SPARK_MASTER", "spark://master:7077", "spark_master", "spark://master:7077"),
        ("LAKEHOUSE_SHUFFLE_PARTITIONS", "16", "shuffle_partitions", 16),
        ("LAKEHOUSE_DRIVER_MEMORY", "4g", "driver_memory", "4g"),
        (
            "LAKEHOUSE_DRIVER_JAVA_OPTIONS",
            " -XX:TieredStopAtLevel=1 ",
            "driver_java_options",
            "-XX:TieredStopAtLevel=1",
        ),
        ("LAKEHOUSE_CLASS_ARCHIVE", "", "class_archive", ""),
        ("LAKEHOUSE_TRIGGER_INTERVAL", "30s", "trigger_interval", "30s"),
        ("LAKEHOUSE_MAX_FILES_PER_TRIGGER", "1", "max_files_per_trigger", 1),
        ("LAKEHOUSE_DEDUPE_HORIZON", "2h", "dedupe_horizon", "2h"),
        ("LAKEHOUSE_WATERMARK_DELAY", "10m", "watermark_delay", "10m"),
        ("LAKEHOUSE_ALLOWED_LATENESS", "1h", "allowed_lateness", "1h"),
        ("LAKEHOUSE_IVY_DIR", "/opt/ivy", "ivy_dir", "/opt/ivy"),
        ("LAKEHOUSE_SPARK_PACKAGES", "org.a:b:1,org.c:d:2", "extra_packages", ("org.a:b:1", "org.c:d:2")),
        ("LAKEHOUSE_CONNECT_PORT", "15010", "connect_port", 15010),
        ("LAKEHOUSE_THRIFT_PORT", "10010", "thrift_port", 10010),
        ("LAKEHOUSE_METASTORE_URL", " jdbc:postgresql://db:5432/ms ", "metastore_url", "jdbc:postgresql://db:5432/ms"),
        ("LAKEHOUSE_METASTORE_USER", "metastore", "metastore_user", "metastore"),
        ("LAKEHOUSE_METASTORE_PASSWORD", "s3cret", "metastore_password", "s3cret"),
        ("LAKEHOUSE_SQL_ROUTE", "sc://10.0.0.5:15002", "sql_route", "sc://10.0.0.5:15002"),
        ("LAKEHOUSE_SQL_STALENESS", "0s", "sql_staleness", "0s"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", " b1:9092,b2.internal:9093 ", "kafka_bootstrap", "b1:9092,b2.internal:9093"),
        ("LAKEHOUSE_KAFKA_TOPIC_PREFIX", "prod.", "kafka_topic_prefix", "prod."),
        ("LAKEHOUSE_KAFKA_PORT", "0", "kafka_port", 0),
        ("LAKEHOUSE_KAFKA_USER", " lakehouse-reader ", "kafka_user", "lakehouse-reader"),
        ("LAKEHOUSE_KAFKA_PASSWORD", "s3cret", "kafka_password", "s3cret"),
        ("LAKEHOUSE_KAFKA_CREDENTIALS", "/etc/lakehouse/kafka.json", "kafka_credentials", "/etc/lakehouse/kafka.json"),
        ("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", "1000", "max_offsets_per_trigger", 1000),
    ],
)
def test_each_environment_variable_overrides_its_own_setting(tmp_path, variable, value, attribute, expected):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), variable: value})
    assert getattr(settings, attribute) == expected


def test_overriding_one_location_leaves_the_others_under_home(tmp_path):
    home = tmp_path.resolve()
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_LOG_URI": "s3a://bucket/log"})
    assert (settings.log_uri, settings.warehouse_uri) == ("s3a://bucket/log", f"file:{home}/warehouse")


def test_a_local_location_override_is_normalised_to_a_file_uri(tmp_path):
    log = tmp_path.resolve() / "elsewhere" / "log"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_LOG_URI": f"file://{log}"})
    assert settings.log_uri == f"file:{log}"


@pytest.mark.parametrize("variable", ["LAKEHOUSE_WATERMARK_DELAY", "LAKEHOUSE_ALLOWED_LATENESS"])
def test_an_empty_lateness_override_means_the_pipelines_own(tmp_path, variable):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), variable: ""})
    assert getattr(settings, variable.removeprefix("LAKEHOUSE_").lower()) is None


@pytest.mark.parametrize(
    "variable",
    [
        "LAKEHOUSE_TRIGGER_INTERVAL",
        "LAKEHOUSE_DEDUPE_HORIZON",
        "LAKEHOUSE_WATERMARK_DELAY",
        "LAKEHOUSE_ALLOWED_LATENESS",
    ],
)
def test_an_unreadable_duration_in_the_environment_is_a_lakehouse_error(tmp_path, variable):
    with pytest.raises(LakehouseError, match=r"cannot read duration 'soon'"):
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), variable: "soon"})


def test_zero_shuffle_partitions_is_a_lakehouse_error(tmp_path):
    with pytest.raises(LakehouseError, match="LAKEHOUSE_SHUFFLE_PARTITIONS must be at least 1"):
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SHUFFLE_PARTITIONS": "0"})


def test_replace_validates_the_changed_settings(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    with pytest.raises(LakehouseError, match=r"cannot read duration '5 minutes'"):
        settings.replace(watermark_delay="5 minutes")


def test_table_and_checkpoint_locations_hang_off_their_roots(tmp_path):
    home = tmp_path.resolve()
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
    assert (
        settings.table_uri("gold", "toll_traffic__speed"),
        settings.pipeline_log_uri("toll_traffic"),
        settings.speed_checkpoint_uri("toll_traffic"),
    ) == (
        f"file:{home}/warehouse/gold/toll_traffic__speed",
        f"file:{home}/log/toll_traffic",
        f"file:{home}/checkpoints/toll_traffic/speed",
    )


def test_the_default_home_is_the_checkout_a_command_runs_in(tmp_path, monkeypatch):
    other = tmp_path / "another-checkout"
    (other / "lakehouse").mkdir(parents=True)
    (other / "pyproject.toml").write_text("")
    (other / "lakehouse" / "settings.py").write_text("")
    monkeypatch.chdir(other)
    assert local_path(Settings.from_env({}).home) == other / ".lakehouse"
    monkeypatch.chdir(tmp_path)  # not a checkout: the one the code comes from
    assert local_path(Settings.from_env({}).home) == PROJECT_ROOT / ".lakehouse"


# --- the Spark service's settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LAKEHOUSE_CONNECT_PORT", "-1", "LAKEHOUSE_CONNECT_PORT must be a port number"),
        ("LAKEHOUSE_THRIFT_PORT", "70000", "LAKEHOUSE_THRIFT_PORT must be a port number"),
        ("LAKEHOUSE_THRIFT_PORT", "ten", "LAKEHOUSE_THRIFT_PORT must be a whole number, not 'ten'"),
        ("LAKEHOUSE_SQL_ROUTE", "server", "LAKEHOUSE_SQL_ROUTE must be auto, embedded or an sc://host:port URL"),
        ("LAKEHOUSE_METASTORE_URL", "jdbc:derby:metastore_db", "LAKEHOUSE_METASTORE_URL must be a jdbc:postgresql://"),
        ("LAKEHOUSE_KAFKA_PORT", "65536", "LAKEHOUSE_KAFKA_PORT must be a port number"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", "kafka://b1:9092", "LAKEHOUSE_KAFKA_BOOTSTRAP must be host:port"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", "b1", "LAKEHOUSE_KAFKA_BOOTSTRAP must be host:port"),
        ("LAKEHOUSE_KAFKA_TOPIC_PREFIX", "prod/", "LAKEHOUSE_KAFKA_TOPIC_PREFIX may hold letters"),
        ("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", "-1", "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER must be 0"),
        # The URL itself stays out of the message: a chat's webhook URL is a secret.
        ("LAKEHOUSE_ALERT_WEBHOOK_URL", "chat.example/hook?token=secret", "must be an http:// or https:// URL$"),
        ("LAKEHOUSE_ALERT_GROUP_INTERVAL", "0s", "LAKEHOUSE_ALERT_GROUP_INTERVAL must be at least 1s"),
        ("LAKEHOUSE_ALERT_GROUP_WAIT", "soon", "cannot read duration 'soon'"),
        ("LAKEHOUSE_ALERTMANAGER_PORT", "70000", "LAKEHOUSE_ALERTMANAGER_PORT must be a port number"),
    ],
)
def test_a_bad_service_setting_is_a_lakehouse_error(tmp_path, variable, value, message):
    with pytest.raises(LakehouseError, match=message):
        Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), variable: value})


def test_the_metastore_password_never_appears_in_the_settings_repr(tmp_path):
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_METASTORE_PASSWORD": "s3cret-42"})
    assert "s3cret-42" not in repr(settings)


@pytest.mark.parametrize(("text", "expected"), [("0", 0), ("1048576", 1048576), ("64k", 65536), ("256m", 256 << 20),
                                                ("1G", 1 << 30), ("2mb", 2 << 20)])  # fmt: skip
def test_parse_size_reads_bytes_and_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1m", "1.5m", "1t", "lots"])
def test_a_size_that_cannot_be_read_is_a_clear_error(text):
    with pytest.raises(LakehouseError, match="cannot read size"):
        Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h", "LAKEHOUSE_MAX_BYTES_PER_TRIGGER": text})
