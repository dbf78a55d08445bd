"""``python -m lakehouse.class_archive``: write the JVM's class-data sharing archive (``make setup``).

A Spark driver with Delta loads some 15,000 classes before its first job, and every CLI command,
spark-submit job and Airflow task is a new driver. Java's class-data sharing writes the classes a
JVM loaded to a file when it exits (a dynamic archive, ``-XX:ArchiveClassesAtExit``); a later JVM
maps that file instead of loading, parsing and verifying them again. Measured side by side on
``lakehouse sql "SELECT 1"``: 9.1 CPU-seconds and 7.4 s without the archive, 5.3 and 4.0 s with it.

The archive is trained on the demo at a small size (the speed layer, a backfill, a correction, the
audits and SQL), so it holds the classes every job loads. It is written beside its final path and
renamed into place: a JVM never maps a half-written archive.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from lakehouse.errors import LakehouseError
from lakehouse.settings import Settings

TRAINING_EVENTS = 1000
JVM_EXIT_SECONDS = 300


def write_class_archive(settings: Settings) -> Path:
    """Run the small demo in a JVM that archives its classes at exit, and put the archive in place.

    The JVM dumps the archive when it exits, which a stopped SparkSession does not make it do: the
    gateway's JVM exits when its standard input closes, so this closes it and waits."""
    from pyspark import SparkContext

    from lakehouse.demo import run_demo
    from lakehouse.storage.spark import ARCHIVE_AT_EXIT, QUICK_START_JAVA_OPTIONS

    target = Path(settings.class_archive)
    target.parent.mkdir(parents=True, exist_ok=True)
    written = target.with_name(f".{target.name}.{time.time_ns()}")
    with tempfile.TemporaryDirectory(prefix="lakehouse-class-archive-") as scratch:
        training = Settings.from_env({"LAKEHOUSE_HOME": str(Path(scratch) / "home")}).replace(
            driver_java_options=f"{QUICK_START_JAVA_OPTIONS} {ARCHIVE_AT_EXIT}{written}",
            ivy_dir=settings.ivy_dir,
            extra_packages=settings.extra_packages,
        )
        run_demo(training, events=TRAINING_EVENTS)
        jvm = SparkContext._gateway.proc
        jvm.stdin.close()
        jvm.wait(timeout=JVM_EXIT_SECONDS)
    if not written.is_file():
        raise LakehouseError(f"the JVM wrote no class archive at {written} (exit code {jvm.returncode})")
    shutil.move(written, target)
    return target


def main() -> None:
    settings = Settings.from_env()
    if not settings.class_archive:
        print("LAKEHOUSE_CLASS_ARCHIVE is empty: no class archive")
        return
    archive = write_class_archive(settings)
    print(f"JVM class archive written: {archive} ({archive.stat().st_size // 2**20} MiB)")


if __name__ == "__main__":
    try:
        main()
    except LakehouseError as error:
        sys.exit(f"lakehouse: error: {error}")
