"""Storage faults (lakehouse.storage.faults): a damaged or missing stream checkpoint (in S3, and in
a local folder), a truncated Delta commit, a full disk, and a log folder deleted while a backfill
reads it. Each stops the job with one line that names the fault, loses nothing, and the job resumes
cleanly once the storage is put right: the tables end equal to a run that met no fault (after a full
disk, every record once: the batches may be cut differently). The jobs run as `lakehouse` commands,
in this process (``lakehouse.cli.main``), on the shared session."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.audit.reconcile import Auditor
from lakehouse.cli import main
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.errors import LakehouseError
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path, to_uri
from lakehouse.serving.status import pipeline_status
from lakehouse.settings import Settings
from lakehouse.storage import archive as log_module
from lakehouse.storage.catalog import STREAM_PROGRESS, pipeline_tables
from lakehouse.storage.faults import check_checkpoint, drop_unplanned_file_entries
from lakehouse.storage.log_files import log_files
from tests.chaos import VOLATILE
from tests.conftest import make_settings
from tests.oracle import gold_rows, run_oracle, truth

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
START = datetime(2026, 1, 5, 8)
# Three deliveries of one file each, an hour apart: the stream reads one, meets a fault, resumes.
PHASES = [
    GeneratorConfig(
        events=300,
        seed=seed,
        start=START + timedelta(hours=hour),
        rate=0.2,
        events_per_file=400,
        late_fraction=0.05,
        late_delay="3m",
        duplicate_fraction=0.03,
        malformed_fraction=0.03,
    )  # fmt: skip
    for hour, seed in ((0, 21), (1, 22), (2, 23))
]
STREAM = ["stream", "--available-now", "--max-files-per-trigger", "1"]
COMPARED = (TABLES.bronze, TABLES.quarantine, TABLES.speed, TABLES.panes, STREAM_PROGRESS)


def _rows(spark, settings, table, also_drop: frozenset[str] = frozenset()) -> list[tuple]:
    frame = spark.read.format("delta").load(table.uri(settings))
    # Each test's log is its own (source_file names it); the runs' ids and times differ too.
    dropped = VOLATILE | {"app_id", "emitted_at", "source_file", "source_files"} | also_drop
    return sorted(
        tuple(map(str, row)) for row in frame.select([c for c in frame.columns if c not in dropped]).collect()
    )


@pytest.fixture(scope="module")
def uninterrupted(spark, tmp_path_factory):
    """The three deliveries streamed with no fault: what every test must end with."""
    settings = make_settings(tmp_path_factory.mktemp("faults") / "home")
    for phase in PHASES:
        generate(settings, phase)
    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    return settings


def _tables(spark, settings) -> dict[str, list[tuple]]:
    return {table.qualified_name: _rows(spark, settings, table) for table in COMPARED}


@pytest.fixture
def home(tmp_path, monkeypatch):
    settings = make_settings(tmp_path / "home")
    for name, value in {"LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_SHUFFLE_PARTITIONS": "2"}.items():
        monkeypatch.setenv(name, str(value))
    return settings


def lakehouse(capsys, *arguments: str) -> tuple[int, str]:
    """Run a command as a user types it; its exit code and the error line it printed (if any)."""
    capsys.readouterr()
    code = main(list(arguments))
    return code, capsys.readouterr().err.strip()


def test_damaged_or_missing_checkpoint_and_commit_files_stop_the_stream_until_put_right(
    spark, uninterrupted, home, object_store_env, monkeypatch, capsys, tmp_path
):
    """The checkpoint in S3 (the local folder's checks are the same code: the test below)."""
    stored = {**object_store_env, "LAKEHOUSE_CHECKPOINT_URI": f"s3a://faults/{tmp_path.name}/checkpoint"}
    for name, value in stored.items():
        monkeypatch.setenv(name, value)
    generate(home, PHASES[0])
    assert lakehouse(capsys, *STREAM) == (0, "")
    with_s3 = Settings.from_env()
    checkpoint = log_files(with_s3, with_s3.speed_checkpoint_uri(PIPELINE.name))
    s3, bucket, prefix = checkpoint.s3, checkpoint.bucket, checkpoint.prefix

    # The newest commit file damaged: the message says to delete it, and the batch runs again.
    commit = f"commits/{_newest_name(checkpoint, 'commits')}"
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{commit}", Body=b'v1\n{"nextBatchWatermarkMs":')
    generate(home, PHASES[1])
    code, error = lakehouse(capsys, *STREAM)
    assert code == 2 and f"damaged stream checkpoint: {checkpoint.uri}/{commit} cannot be read" in error, error
    assert "; delete it: the micro-batch it marks runs again" in error  # no checksum file in S3
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/{commit}")
    assert lakehouse(capsys, *STREAM) == (0, "")

    # The newest offsets file damaged: it must be restored (it names the batch's files).
    offsets = f"{prefix}/offsets/{_newest_name(checkpoint, 'offsets')}"
    kept = s3.get_object(Bucket=bucket, Key=offsets)["Body"].read()
    s3.put_object(Bucket=bucket, Key=offsets, Body=kept[:25])
    code, error = lakehouse(capsys, *STREAM)
    assert code == 2 and f"s3a://{bucket}/{offsets} cannot be read" in error and "restore it from a backup" in error
    s3.put_object(Bucket=bucket, Key=offsets, Body=kept)

    # The checkpoint gone (here: the stream pointed at an empty location) while batches have
    # committed: a new query would read everything again.
    monkeypatch.setenv("LAKEHOUSE_CHECKPOINT_URI", f"s3a://faults/{tmp_path.name}/elsewhere")
    code, error = lakehouse(capsys, *STREAM)
    assert code == 2 and "missing stream checkpoint" in error and "/elsewhere/toll_traffic/speed holds no" in error
    monkeypatch.setenv("LAKEHOUSE_CHECKPOINT_URI", stored["LAKEHOUSE_CHECKPOINT_URI"])

    # bronze's newest commit truncated: Delta's checksum finds it; restored, the stream goes on.
    delta_commit = sorted((local_path(TABLES.bronze.uri(home)) / "_delta_log").glob("*.json"))[-1]
    kept = delta_commit.read_bytes()
    delta_commit.write_bytes(kept[: len(kept) // 2])
    generate(home, PHASES[2])
    code, error = lakehouse(capsys, *STREAM)
    assert code == 2 and f"damaged Delta commit: commit {int(delta_commit.stem)} of the table at" in error, error
    delta_commit.write_bytes(kept)
    assert lakehouse(capsys, *STREAM) == (0, "")

    assert _tables(spark, home) == _tables(spark, uninterrupted)


def _newest_name(files, folder: str) -> int:
    return max(int(name) for name in files.names(folder) if name.isdigit())


def test_a_damaged_or_missing_local_checkpoint_is_named_with_what_to_do(tmp_path):
    """The checks on a local checkpoint folder, as Spark writes one: each file with Hadoop's checksum."""
    root = tmp_path / "checkpoint"
    files = {
        "metadata": '{"id":"5f0c"}',
        "offsets/0": 'v1\n{"batchWatermarkMs":0}\n{"logOffset":0}',
        "offsets/1": 'v1\n{"batchWatermarkMs":0}\n{"logOffset":1}',
        "commits/0": 'v1\n{"nextBatchWatermarkMs":0}',
        "commits/1": 'v1\n{"nextBatchWatermarkMs":0}',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
        (root / name).with_name(f".{(root / name).name}.crc").write_bytes(b"crc")
    checkpoint = log_files(make_settings(tmp_path / "home"), to_uri(root))
    check_checkpoint(checkpoint, committed_batches=2)

    (root / "commits" / "1").write_bytes(b"v1\n\xff\xfe")  # not even text
    with pytest.raises(LakehouseError) as damaged:
        check_checkpoint(checkpoint, committed_batches=2)
    assert f"damaged stream checkpoint: {root}/commits/1 cannot be read" in str(damaged.value)
    assert f"; delete it and {root}/commits/.1.crc: the micro-batch it marks runs again" in str(damaged.value)
    (root / "commits" / "1").write_text(files["commits/1"])

    (root / "offsets" / "1").write_text("v1\n{")
    with pytest.raises(LakehouseError, match=re.escape(f"; restore it from a backup (with {root}/offsets/.1.crc)")):
        check_checkpoint(checkpoint, committed_batches=2)
    (root / "offsets" / "1").write_text(files["offsets/1"])

    (root / "metadata").unlink()
    with pytest.raises(
        LakehouseError, match=re.escape(f"missing stream checkpoint: {root} holds no query, but 2 micro")
    ):
        check_checkpoint(checkpoint, committed_batches=2)
    check_checkpoint(checkpoint, committed_batches=0)  # a new stream: nothing to lose


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MB file system of its own (tmpfs): what a full disk looks like to the jobs."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_stops_the_stream_with_a_clear_message_and_it_resumes_once_freed(
    spark, uninterrupted, small_disk, tmp_path, monkeypatch, capsys
):
    log_home = make_settings(tmp_path / "log-home")
    for phase in PHASES:
        generate(log_home, phase)
    settings = make_settings(small_disk / "home", LAKEHOUSE_LOG_URI=log_home.log_uri)
    for name, value in {"LAKEHOUSE_HOME": settings.home, "LAKEHOUSE_LOG_URI": log_home.log_uri}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "2")
    # Room for the tables' creation and about a micro-batch (a small file takes a 4 KB block), then none.
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 300_000))
    code, error = lakehouse(capsys, *STREAM)
    assert code == 2 and error.startswith("lakehouse: error: disk full: no space left on the device"), error
    ballast.unlink()
    assert lakehouse(capsys, *STREAM) == (0, "")
    # The batch that failed is planned again on restart, and may take in the next file too: Spark's
    # file source had logged its file before the offsets could be written. Batches (and so fates)
    # may differ from the uninterrupted run's; every record must still be there once.
    per_record = frozenset({"batch_id", "fate"})
    for table in (TABLES.bronze, TABLES.quarantine):
        assert _rows(spark, settings, table, per_record) == _rows(spark, uninterrupted, table, per_record)
    status, expected = pipeline_status(settings, PIPELINE), pipeline_status(uninterrupted, PIPELINE)
    assert status.balanced and status.read == expected.read
    assert Auditor(spark, settings, PIPELINE).reconcile(START, START + timedelta(hours=3), record=False).ok


def test_a_log_folder_deleted_while_a_backfill_reads_it_stops_it_and_a_rerun_recomputes(
    spark, home, monkeypatch, capsys
):
    for phase in PHASES[:2]:
        generate(home, phase)
    log_root = local_path(home.pipeline_log_uri(PIPELINE.name))
    folders = sorted(p for p in log_root.rglob("ingest_hour=*") if p.is_dir())
    aside = Path(local_path(home.home)) / "aside"
    real_read_log = log_module.read_log

    def read_then_lose_a_folder(*args, **kwargs):
        frame = real_read_log(*args, **kwargs)  # the files are listed; the reading comes later
        shutil.move(folders[-1], aside)
        return frame

    monkeypatch.setattr("lakehouse.layers.batch.read_log", read_then_lose_a_folder)
    backfill = ["backfill", "--start", "2026-01-05T08:00", "--end", "2026-01-05T10:00", "--source", "log"]
    code, error = lakehouse(capsys, *backfill, "--chunk", "30m")
    assert code == 2 and "file vanished while read:" in error and str(folders[-1].name) in error, error
    monkeypatch.setattr("lakehouse.layers.batch.read_log", real_read_log)
    batch = TABLES.batch.uri(home)
    assert spark.read.format("delta").load(batch).count() == 0, "no chunk of the failed backfill was written"
    shutil.move(aside, folders[-1])
    assert lakehouse(capsys, *backfill, "--chunk", "30m") == (0, "")
    oracle = run_oracle(log_root, timedelta(minutes=2))
    assert gold_rows(spark.read.format("delta").load(batch)) == truth(oracle, START, START + timedelta(hours=2))


def test_a_stream_killed_while_planning_its_first_batch_starts_again(spark, uninterrupted, home, capsys):
    # What a SIGKILL between Hadoop's write of the first offsets file and its rename leaves (seen
    # in the chaos loop on S3, where the rename is a copy): the query's metadata, and the temporary
    # file beside the offsets it never planned. Spark alone refuses to start on it.
    for phase in PHASES:
        generate(home, phase)
    checkpoint = local_path(home.speed_checkpoint_uri(PIPELINE.name))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"6f1c3f0e-7d0a-4a37-9a55-0b4f1c0c2e11"}')
    abandoned = checkpoint / "offsets" / ".0.42fe4a90-8abf-4ab3-b74f-a56bfca03f3c.tmp"
    abandoned.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1')
    code, error = lakehouse(capsys, *STREAM)
    assert (code, error) == (0, "")
    assert not abandoned.exists()
    assert _tables(spark, home) == _tables(spark, uninterrupted)


# Spark compacts its file source's log every tenth entry (the setting): at 2, entry 1 is compacted.
COMPACT_INTERVAL = "spark.sql.streaming.fileSource.log.compactInterval"


@pytest.mark.parametrize("compact_interval", [None, "2"], ids=["plain entry", "compacted entry"])
def test_a_stream_killed_between_picking_its_next_file_and_planning_the_batch_cuts_its_batches_as_before(
    spark, uninterrupted, home, capsys, compact_interval
):
    # What a SIGKILL between the file source's entry for the next batch's file and the batch's
    # offsets file leaves (found by the chaos loop in CI): entry 1, which no offsets file names.
    # Spark alone then reads it and the file after it as one batch.
    if compact_interval:
        spark.conf.set(COMPACT_INTERVAL, compact_interval)
    try:
        generate(home, PHASES[0])
        assert lakehouse(capsys, *STREAM) == (0, "")
        for phase in PHASES[1:]:
            generate(home, phase)
        log_root = local_path(home.log_uri)
        first, second, third = sorted(log_root.rglob("*.jsonl"), key=lambda path: path.stat().st_mtime_ns)
        entries = local_path(home.speed_checkpoint_uri(PIPELINE.name)) / "sources" / "0"
        assert sorted(path.name for path in entries.iterdir() if path.name.isdigit()) == ["0"]
        picked = {"path": f"file://{second}", "timestamp": second.stat().st_mtime_ns // 1_000_000, "batchId": 1}
        # A compacted entry repeats entry 0's lines before its own.
        earlier = (entries / "0").read_text().splitlines()[1:] if compact_interval else []
        pick = "1.compact" if compact_interval else "1"
        (entries / pick).write_text("\n".join(["v1", *earlier, json.dumps(picked)]))
        assert lakehouse(capsys, *STREAM) == (0, "")
    finally:
        spark.conf.unset(COMPACT_INTERVAL)
    repeated = [f"file://{first}"] if compact_interval else []
    assert [_entry_files(entries / name) for name in (pick, "2")] == [
        [*repeated, f"file://{second}"],
        [f"file://{third}"],
    ]
    assert _tables(spark, home) == _tables(spark, uninterrupted)


@pytest.mark.parametrize(
    ("entries", "planned", "dropped"),
    [
        (["0", "1", "2"], 1, ["2"]),  # the pick after batch 1's
        (["0", "1"], 1, []),  # nothing picked beyond the plan
        ([f"{batch}" for batch in range(9)] + ["9.compact"], 8, ["9.compact"]),  # it repeats entries 0 to 8
        (["9.compact", "10", "11"], 10, ["11"]),
        (["9.compact", "10", "11", "19.compact"], 11, []),  # 12 to 18 gone: only the compaction has them
    ],
)
def test_a_pick_no_batch_planned_is_dropped_when_no_earlier_entry_depends_on_it(tmp_path, entries, planned, dropped):
    root = tmp_path / "checkpoint"
    (root / "offsets").mkdir(parents=True)
    (root / "offsets" / str(planned)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{planned}}}')
    (root / "sources" / "0").mkdir(parents=True)
    for name in entries:
        (root / "sources" / "0" / name).write_text("v1\n")
        (root / "sources" / "0" / f".{name}.crc").write_bytes(b"crc")
    checkpoint = log_files(make_settings(tmp_path / "home"), to_uri(root))
    assert drop_unplanned_file_entries(checkpoint) == dropped
    kept = [name for name in entries if name not in dropped]
    assert sorted(path.name for path in (root / "sources" / "0").iterdir()) == sorted(
        kept + [f".{name}.crc" for name in kept]
    )


def _entry_files(entry: Path) -> list[str]:
    return [json.loads(line)["path"] for line in entry.read_text().splitlines()[1:]]
