"""Local tables and checkpoints through the platform's Hadoop file system
(``lakehouse/storage/java``): the same files, permissions and refusals as Hadoop's, without a
process started per file."""

from __future__ import annotations

import stat

import pytest


def started_processes(spark, work, dump_path) -> list[str]:
    """The commands of the processes the session's JVM started while ``work()`` ran (Java's flight
    recorder, which records each process start)."""
    jvm = spark.sparkContext._jvm
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        work()
    finally:
        recording.stop()
    dump = jvm.java.io.File(str(dump_path)).toPath()
    recording.dump(dump)
    recording.close()
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump)
    return [events.get(i).getString("command") for i in range(events.size())]


def test_local_files_go_through_the_platforms_file_system(spark, tmp_path):
    jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    uri = jvm.java.net.URI(tmp_path.as_uri())
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == "lakehouse.storage.ForkFreeLocalFileSystem$Context"


def test_delta_commits_and_stream_checkpoints_start_no_process(spark, tmp_path):
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")

    def commits_and_a_stream():
        spark.range(3).write.format("delta").save(table)
        spark.range(3, 5).write.format("delta").mode("append").save(table)
        query = (
            spark.readStream.format("delta").load(table)
            .writeStream.format("delta").option("checkpointLocation", checkpoint).trigger(availableNow=True)
            .start(str(tmp_path / "copy"))
        )  # fmt: skip
        query.awaitTermination()

    started = started_processes(spark, commits_and_a_stream, tmp_path / "processes.jfr")
    # Each commit and checkpoint file cost a chmod, and each rename two readlinks. (Data files and
    # folders are made through Hadoop's FileSystem, which still starts a chmod for each: see
    # FORK_FREE_FILE_CONTEXT.)
    per_file = [c for c in started if c.startswith(("readlink", "chmod 0644"))]
    assert [c for c in per_file if c.startswith("readlink") or "_delta_log/" in c or "checkpoint" in c] == []
    assert per_file, "no data file was written"
    assert sorted(r.id for r in spark.read.format("delta").load(str(tmp_path / "copy")).collect()) == list(range(5))
    assert list((tmp_path / "checkpoint" / "offsets").glob(".*.crc")), "Hadoop's checksum files are gone"


def java_array(spark, java_class, *items):
    array = spark.sparkContext._gateway.new_array(java_class, len(items))
    for index, item in enumerate(items):
        array[index] = item
    return array


def test_permissions_and_the_rename_that_never_replaces_are_hadoops(spark, tmp_path):
    jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs
    context = fs.FileContext.getFileContext(jvm.java.net.URI(tmp_path.as_uri()), conf)
    create = jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE)
    for name, mode, symbolic in (("first", 0o640, "-rw-r-----"), ("second", 0o604, "-rw----r--")):
        permission = fs.Options.CreateOpts.perms(fs.permission.FsPermission.valueOf(symbolic))
        stream = context.create(
            fs.Path((tmp_path / name).as_uri()), create, java_array(spark, fs.Options.CreateOpts, permission)
        )
        stream.write(bytearray(name.encode()))
        stream.close()
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode
    never_replace = java_array(spark, fs.Options.Rename, fs.Options.Rename.NONE)
    with pytest.raises(Exception, match="FileAlreadyExistsException|already exists"):
        context.rename(fs.Path((tmp_path / "first").as_uri()), fs.Path((tmp_path / "second").as_uri()), never_replace)
    assert (tmp_path / "second").read_text() == "second"
    context.rename(fs.Path((tmp_path / "first").as_uri()), fs.Path((tmp_path / "third").as_uri()), never_replace)
    assert (tmp_path / "third").read_text() == "first" and not (tmp_path / "first").exists()
