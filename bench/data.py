"""The benchmark data: generated once per size and seed, cached under ``.cache/bench/``, never timed.

A data set is one day of toll traffic (``events`` spread evenly over 24 hours of event time, with
the generator's default share of stragglers, duplicates and malformed records) in a retained log,
plus a lakehouse home where the speed layer has already read all of it: bronze, ``__speed`` and
``ops.stream_progress`` as a long-running stream would leave them, for the backfills and audits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from lakehouse.generator import DEFAULT_START, GeneratorConfig, generate
from lakehouse.settings import PROJECT_ROOT, Settings

CACHE = PROJECT_ROOT / ".cache" / "bench"
PIPELINE = "toll_traffic"
DAY = timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class DataSet:
    events: int
    seed: int = 11
    events_per_file: int = 5000

    @property
    def root(self) -> Path:
        return CACHE / f"{PIPELINE}-{self.events}-s{self.seed}-f{self.events_per_file}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def start(self) -> datetime:
        """Event time of the first event (naive UTC, on a window boundary)."""
        return DEFAULT_START.replace(tzinfo=None)

    @property
    def generator_config(self) -> GeneratorConfig:
        # A day of event time whatever the size: an hour is 1/24 of the data, as cost growth needs.
        return GeneratorConfig(events=self.events, seed=self.seed, start=DEFAULT_START,
                               rate=self.events / DAY.total_seconds(), events_per_file=self.events_per_file)

    def settings(self, **env: str) -> Settings:
        return settings_for(self.home, **env)

    def log_files(self) -> list[Path]:
        """The log's files in arrival order (their names start with the arrival time)."""
        log = self.home / "log" / PIPELINE
        return sorted(log.glob("ingest_date=*/ingest_hour=*/*.jsonl"), key=lambda path: path.name)


def settings_for(home: Path, **env: str) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(home), **env})


def ensure_log(data: DataSet) -> dict:
    """Generate the raw log once; the marker file is written last, so a half-written log is redone."""
    marker = data.root / "log.json"
    if marker.exists():
        return json.loads(marker.read_text())
    shutil.rmtree(data.home / "log", ignore_errors=True)
    generated = generate(data.settings(), data.generator_config, PIPELINE)
    info = {**generated.as_dict(), "generated_at": datetime.now(timezone.utc).isoformat()}
    marker.write_text(json.dumps(info, indent=1))
    return info


def ensure_streamed(spark, data: DataSet) -> None:
    """Let the speed layer read the whole log once (one micro-batch per 20 files), so bronze exists."""
    from lakehouse.pipelines import get_pipeline
    from lakehouse.speed import run_speed_layer

    marker = data.root / "streamed.json"
    if marker.exists():
        return
    for folder in ("warehouse", "checkpoints"):
        shutil.rmtree(data.home / folder, ignore_errors=True)
    settings = data.settings(LAKEHOUSE_MAX_FILES_PER_TRIGGER="20")
    run_speed_layer(spark, settings, get_pipeline(PIPELINE), available_now=True)
    marker.write_text(json.dumps({"streamed_at": datetime.now(timezone.utc).isoformat()}))


def scratch_home(name: str) -> Path:
    """An empty home for a benchmark that writes its own tables (removed and re-created)."""
    home = CACHE / "scratch" / name
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    return home


def link_log_files(files: list[Path], source_log: Path, target_log: Path) -> None:
    """Hard-link log files into another log (same layout and modification times: no copying)."""
    for path in files:
        target = target_log / path.relative_to(source_log)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, target)
