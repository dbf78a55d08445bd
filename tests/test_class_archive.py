"""The driver JVM's start-up options: the class archive (every driver maps it when it exists, and
the one ``make setup`` wrote matches this machine's JVM and Spark class path), and the JIT's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.settings import Settings
from lakehouse.storage.java import java_executable
from lakehouse.storage.spark import (
    ARCHIVE_AT_EXIT,
    QUICK_START_JAVA_OPTIONS,
    class_archive_options,
    driver_java_options,
)


def settings_with(tmp_path: Path, archive: str, java_options: str = "") -> Settings:
    return Settings.from_env(
        {
            "LAKEHOUSE_HOME": str(tmp_path),
            "LAKEHOUSE_CLASS_ARCHIVE": archive,
            "LAKEHOUSE_DRIVER_JAVA_OPTIONS": java_options,
        }
    )


def test_an_existing_archive_goes_on_the_driver_command_line_before_the_users_options(tmp_path):
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"archive")

    options = driver_java_options(settings_with(tmp_path, str(archive), "-Xss4m"))

    assert f"-XX:SharedArchiveFile={archive}" in options
    assert options.endswith(" -Xss4m")


def test_no_archive_option_when_the_file_is_missing_or_the_setting_is_empty(tmp_path):
    assert class_archive_options(settings_with(tmp_path, str(tmp_path / "missing.jsa"))) == ""
    assert class_archive_options(settings_with(tmp_path, "")) == ""


def test_the_jvm_that_writes_an_archive_maps_none(tmp_path):
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"archive")
    writing = settings_with(tmp_path, str(archive), f"{ARCHIVE_AT_EXIT}{tmp_path / 'next.jsa'}")

    assert "SharedArchiveFile" not in driver_java_options(writing)


@pytest.mark.spark
def test_a_lakehouse_command_maps_the_archive_make_setup_wrote(tmp_path):
    archive = Settings.from_env().class_archive
    if not Path(archive).is_file():
        pytest.fail(f"no class archive at {archive}: `make setup` writes it (python -m lakehouse.class_archive)")
    # -Xshare:on: the JVM fails to start, instead of starting without it, when the archive does not
    # match its build or Spark's class path.
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_DRIVER_JAVA_OPTIONS": "-Xshare:on"}
    finished = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "sql", "SELECT 1 AS one", "--format", "csv"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout == "one\n1\n"


@pytest.mark.spark
def test_a_quick_start_driver_compiles_huge_methods_with_the_full_code_cache(tmp_path):
    """With the quick compiler only, the JVM alone reserves 48 MB of code cache: compiled generated
    code filled that, and a demo task failed with "Out of space in CodeCache for adapters"."""
    options = driver_java_options(settings_with(tmp_path, "", QUICK_START_JAVA_OPTIONS))

    printed = subprocess.run(
        [java_executable(), *options.split(), "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flags = dict(re.findall(r"^\s*\S+\s+(\w+)\s+:?=\s+(\S+)", printed, re.MULTILINE))

    assert flags["TieredStopAtLevel"] == "1"
    assert flags["DontCompileHugeMethods"] == "false"
    assert int(flags["ReservedCodeCacheSize"]) >= 240 * 2**20
