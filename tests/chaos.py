"""The chaos loop: the stream, a backfill, a late-data correction and maintenance run at once on one
pipeline, each a `lakehouse` process as a user starts it; again and again a random one of them is
SIGKILLed (its whole process group: the driver and Spark's JVM, as in a machine crash) at a random
moment, and started again. Once the kills are spent every job ends cleanly, and the loop's tables
are compared with a clean run of the same jobs one after the other (``tests/test_chaos.py``; `make
chaos` runs a long one and writes its figures to test-artifacts/chaos.json).

The random choices come from one seed, printed first: a failure names the seed that replays the
choices (the moments a kill lands at still depend on the machine's speed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.location import Location, Scheme, local_path
from lakehouse.settings import Settings
from lakehouse.storage.catalog import STREAM_PROGRESS, Table, pipeline_tables
from tests.conftest import make_settings

PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
# Processing-time columns: they differ between any two runs.
VOLATILE = {"ingested_at", "quarantined_at", "updated_at", "started_at", "duration_ms", "stage_ms"}
# Recent event times: maintenance expires log hours older than the retention, measured from now.
START = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0, tzinfo=None)
# An hour of toll events with every defect, in 6 files: 6 micro-batches of one file each.
CONFIG = GeneratorConfig(
    events=600,
    seed=11,
    start=START,
    rate=0.18,
    late_fraction=0.05,
    late_delay="3m",
    duplicate_fraction=0.03,
    malformed_fraction=0.03,
    events_per_file=100,
)
SPAN = timedelta(hours=1)
# The backfill recomputes the first half hour from the log; the stream (and its corrections) serve the rest.
BACKFILL_RANGE = (START, START + timedelta(minutes=30))
BACKFILL_CHUNK = "10m"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


JOB_COMMANDS = {
    "stream": ("stream", "--available-now", "--max-files-per-trigger", "1"),
    "backfill": ("backfill", "--start", _iso(BACKFILL_RANGE[0]), "--end", _iso(BACKFILL_RANGE[1]))
    + ("--source", "log", "--chunk", BACKFILL_CHUNK),
    "correct": ("correct",),
    "maintain": ("maintain",),
}


# The race with no kill: the same jobs and a second backfill of the same range, so that two
# backfills of one hour commit to __batch at once, besides the stream against maintenance.
RACE_COMMANDS = {**JOB_COMMANDS, "backfill-again": JOB_COMMANDS["backfill"]}


@dataclasses.dataclass
class Job:
    """One of the loop's jobs: its current process and what befell its runs."""

    name: str
    command: tuple[str, ...]
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    runs: int = 0
    clean_exits: int = 0
    kills: list[float] = dataclasses.field(default_factory=list)  # seconds into the run it was killed at

    def start(self, env: dict[str, str], log_dir: Path) -> None:
        self.runs += 1
        stderr = (log_dir / f"{self.name}-{self.runs:03d}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lakehouse.cli", *self.command],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        stderr.close()
        self.started_at = time.monotonic()

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.kills.append(round(time.monotonic() - self.started_at, 1))

    def ended_cleanly(self, log_dir: Path) -> bool:
        """True once, when the current run has ended cleanly (the job then has no process); a run that
        fails without a kill is an error: a conflict or a crash that reached the user."""
        code = self.process.poll() if self.process else None
        if code is None:
            return False
        if code != 0:
            tail = (log_dir / f"{self.name}-{self.runs:03d}.log").read_text()[-3000:]
            raise ChaosFailure(f"{self.name} (run {self.runs}) failed with exit code {code}:\n{tail}")
        self.clean_exits += 1
        self.process = None
        return True


class ChaosFailure(AssertionError):
    pass


@dataclasses.dataclass(frozen=True)
class ScriptedKill:
    """Kill ``job`` as soon as ``table`` has ``commits`` commit files: a chosen point between two
    writes of a micro-batch. Commit 0 creates the table, so (bronze, 3) falls right after batch 2's
    bronze write, before its other writes. With ``operation``, the point is the next commit of that
    operation (``VACUUM START``, say) after the kill's turn came, whatever the other jobs commit."""

    job: str
    table: Table
    commits: int = 1
    operation: str | None = None


@dataclasses.dataclass(frozen=True)
class ChaosPlan:
    """How much chaos: ``kills`` SIGKILLs in all: the scripted ones, each when its point comes, and
    the others on a random running job at random moments, ``gap`` seconds apart (drawn uniformly)."""

    seed: int
    kills: int
    scripted: tuple[ScriptedKill, ...] = ()
    gap: tuple[float, float] = (2.0, 10.0)
    timeout_s: float = 3600.0


# The stream between its writes: right after a batch's bronze append, after a quarantine append,
# and after a batch's progress row. (The crash between the MERGE into __speed and the progress row,
# a window of milliseconds, is tests/test_kafka.py's, which stops the stream there.)
# And maintenance in the middle of a VACUUM: bronze's VACUUM START committed, its VACUUM END not.
BETWEEN_WRITES = (
    ScriptedKill("stream", TABLES.bronze, 3),
    ScriptedKill("stream", TABLES.quarantine, 4),
    ScriptedKill("stream", STREAM_PROGRESS, 5),
    ScriptedKill("maintain", TABLES.bronze, operation="VACUUM START"),
)
# CI's two, for its time budget: the stream in the middle of a batch's writes (bronze and quarantine
# appended, its panes and progress not: a restart must skip both appends), and maintenance in the
# middle of a VACUUM. `make chaos` makes all of BETWEEN_WRITES, then its random kills.
MID_WRITES = (BETWEEN_WRITES[1], BETWEEN_WRITES[3])


def shared_log(root: Path, store: dict[str, str] | None = None) -> dict[str, str]:
    """Generate the loop's log once under ``root``; both runs read it (LAKEHOUSE_LOG_URI). With
    ``store`` (an S3 server's variables), both runs keep their tables and checkpoints on it."""
    log_home = make_settings(root / "log-home")
    generate(log_home, CONFIG)
    return {"LAKEHOUSE_LOG_URI": log_home.log_uri, **(store or {})}


def home_env(home: Path, shared: dict[str, str]) -> dict[str, str]:
    """The variables of one run's home: the shared ones and, when they name an S3 server, the
    home's own s3a:// locations for its tables and checkpoints (a prefix per loop and home)."""
    if "LAKEHOUSE_S3_ENDPOINT" not in shared:
        return dict(shared)
    prefix = f"s3a://chaos/{home.parent.name}-{home.name}"
    locations = {"LAKEHOUSE_WAREHOUSE_URI": f"{prefix}/warehouse", "LAKEHOUSE_CHECKPOINT_URI": f"{prefix}/checkpoints"}
    return {**shared, **locations}


def home_settings(home: Path, shared: dict[str, str]) -> Settings:
    return make_settings(home, **home_env(home, shared))


def job_env(home: Path, log: dict[str, str]) -> dict[str, str]:
    from lakehouse.storage.spark import QUICK_START_JAVA_OPTIONS

    return {
        **os.environ,
        "LAKEHOUSE_DRIVER_JAVA_OPTIONS": os.environ.get("LAKEHOUSE_DRIVER_JAVA_OPTIONS", QUICK_START_JAVA_OPTIONS),
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        **home_env(home, log),
    }


class ChaosLoop:
    """The four jobs at once in one home, and the kills of a plan among them."""

    def __init__(self, plan: ChaosPlan, home: Path, log: dict[str, str], commands: dict | None = None):
        self.plan, self.rng = plan, random.Random(plan.seed)
        self.env, self.settings = job_env(home, log), home_settings(home, log)
        self.log_dir = home.parent / f"{home.name}-logs"
        self.jobs = {name: Job(name, command) for name, command in (commands or JOB_COMMANDS).items()}
        self.scripted_done, self.random_done, self.next_kill = 0, 0, 0.0
        self.operations_before: int | None = None  # the current scripted kill's operation count at its turn

    @property
    def kills_left(self) -> int:
        return self.plan.kills - self.scripted_done - self.random_done

    def run(self) -> dict:
        """Kill and start again until the plan's kills are spent, then let each job end cleanly;
        what happened. A job that ends cleanly stays ended, unless none runs while kills remain:
        then a random one starts again, so that there is something to kill."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for job in self.jobs.values():
            job.start(self.env, self.log_dir)
        began = time.monotonic()
        self.next_kill = began + self.rng.uniform(*self.plan.gap)
        try:
            while self.kills_left or any(job.process for job in self.jobs.values()):
                if time.monotonic() - began > self.plan.timeout_s:
                    raise ChaosFailure(f"the loop ran past {self.plan.timeout_s:.0f} s, {self.kills_left} kills left")
                for job in self.jobs.values():
                    job.ended_cleanly(self.log_dir)
                if self.kills_left and not any(job.process for job in self.jobs.values()):
                    self.rng.choice(list(self.jobs.values())).start(self.env, self.log_dir)
                if victim := self._victim():
                    victim.kill()
                    victim.start(self.env, self.log_dir)
                time.sleep(0.05)
        finally:
            for job in self.jobs.values():
                if job.process and job.process.poll() is None:
                    os.killpg(job.process.pid, signal.SIGKILL)
        return _report(self.plan, list(self.jobs.values()), time.monotonic() - began)

    def _victim(self) -> Job | None:
        """The job to kill now, if any: the next scripted kill once its commit is there; meanwhile,
        once the random moment has come, a random running job."""
        if self.scripted_done < len(self.plan.scripted) and self._scripted_point_reached():
            self.scripted_done += 1
            self.operations_before = None
            return self.jobs[self.plan.scripted[self.scripted_done - 1].job]
        random_kills = self.plan.kills - len(self.plan.scripted)
        if self.random_done >= random_kills or time.monotonic() < self.next_kill:
            return None
        running = [job for job in self.jobs.values() if job.process]
        if not running:
            return None
        self.random_done += 1
        self.next_kill = time.monotonic() + self.rng.uniform(*self.plan.gap)
        return self.rng.choice(running)

    def _scripted_point_reached(self) -> bool:
        """Whether the next scripted kill's job runs and its point has come. A job whose kill is next
        and that has ended is started again, so that its point can come."""
        point = self.plan.scripted[self.scripted_done]
        job = self.jobs[point.job]
        if not job.process:
            job.start(self.env, self.log_dir)
            return False
        if point.operation is None:
            return commits(self.settings, point.table) >= point.commits
        done = len([op for op in operations(self.settings, point.table) if op == point.operation])
        if self.operations_before is None:
            self.operations_before = done
        return done >= self.operations_before + point.commits


# How long a stream may take to reach its kill point.
KILL_POINT_SECONDS = 240


def kill_after(
    settings: Settings, env: dict[str, str], table: Table, target_commits: int, on: tuple[str, ...] = ()
) -> None:
    """Start the stream (one file per trigger) and SIGKILL it, driver and JVM, once ``table`` has
    ``target_commits`` commit files.

    Args:
        settings: where ``table`` is, as this process reaches it.
        env: the stream's environment.
        table: the table whose commits are counted.
        target_commits: how many commit files it has when the kill comes.
        on: what runs the command, before it (``lakehouse hosts run HOST --``: on a host).
    """
    process = subprocess.Popen(
        [*on, sys.executable, "-m", "lakehouse.cli", *JOB_COMMANDS["stream"]],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + KILL_POINT_SECONDS
    try:
        while commits(settings, table) < target_commits:
            if process.poll() is not None:
                raise ChaosFailure(f"stream ended before the kill point: {process.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                raise ChaosFailure(f"kill point {table.qualified_name}@{target_commits} not reached")
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def commits(settings: Settings, table: Table) -> int:
    """The table's commit files: in a local folder, or through boto3 in object storage."""
    location = Location.parse(table.uri(settings))
    if location.scheme is Scheme.S3:
        from lakehouse.storage import object_store

        s3 = object_store.client(settings)
        try:
            listed = s3.list_objects_v2(Bucket=location.bucket, Prefix=f"{location.key}/_delta_log/")
        except s3.exceptions.NoSuchBucket:  # the job has not created it yet
            return 0
        return sum(item["Key"].endswith(".json") for item in listed.get("Contents", []))
    log_dir = location.local_path / "_delta_log"
    return len(list(log_dir.glob("*.json"))) if log_dir.exists() else 0


def operations(settings: Settings, table: Table) -> list[str]:
    """The operation of each commit of a table, in commit order ([] before it exists)."""
    found = []
    for text in _commit_texts(settings, table):
        try:
            actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:  # being written: read again next time
            continue
        found += [action["commitInfo"].get("operation", "") for action in actions if "commitInfo" in action]
    return found


def _commit_texts(settings: Settings, table: Table) -> list[str]:
    """The text of each commit file of the table, in commit order: from a local folder, or through
    boto3 from object storage (an S3 object appears whole)."""
    location = Location.parse(table.uri(settings))
    if location.scheme is Scheme.S3:
        from lakehouse.storage import object_store

        s3, prefix = object_store.client(settings), f"{location.key}/_delta_log/"
        try:
            listed = s3.list_objects_v2(Bucket=location.bucket, Prefix=prefix).get("Contents", [])
        except s3.exceptions.NoSuchBucket:
            return []
        keys = sorted(item["Key"] for item in listed if item["Key"][len(prefix) :].removesuffix(".json").isdigit())
        return [s3.get_object(Bucket=location.bucket, Key=key)["Body"].read().decode() for key in keys]
    log_dir = local_path(table.uri(settings)) / "_delta_log"
    texts = []
    for commit in sorted(log_dir.glob("*.json")) if log_dir.exists() else []:
        try:
            texts.append(commit.read_text())
        except OSError:  # gone: read again next time
            continue
    return texts


def _report(plan: ChaosPlan, jobs: list[Job], seconds: float) -> dict:
    return {
        "seed": plan.seed,
        "kills": sum(len(job.kills) for job in jobs),
        "seconds": round(seconds, 1),
        "jobs": {
            job.name: {"runs": job.runs, "clean_exits": job.clean_exits, "killed_at_seconds": job.kills} for job in jobs
        },
    }


def clean_run(spark, settings: Settings) -> None:
    """The same jobs once each, one after the other, in this process: what the loop must end with."""
    from lakehouse.layers.batch import BatchLayer
    from lakehouse.layers.corrections import CorrectionRun
    from lakehouse.layers.speed import run_speed_layer
    from lakehouse.storage.maintenance import maintain

    run_speed_layer(spark, settings.replace(max_files_per_trigger=1), PIPELINE, available_now=True)
    BatchLayer(spark, settings, PIPELINE).backfill(*BACKFILL_RANGE, source="log", chunk=BACKFILL_CHUNK)
    CorrectionRun(spark, settings, PIPELINE).run()
    maintain(spark, settings, PIPELINE, datetime.now(UTC))


def settle(spark, settings: Settings) -> None:
    """After the loop: one more correction, as the next scheduled one would, for late events the
    stream read after the loop's last correction had ended."""
    from lakehouse.layers.corrections import CorrectionRun

    CorrectionRun(spark, settings, PIPELINE).run()


def main() -> None:
    """`make chaos`: a long loop (CHAOS_KILLS, default 100; CHAOS_SEED, default random) and its checks;
    with CHAOS_STORE=s3, the tables and checkpoints on the project's S3 server (figures in
    test-artifacts/chaos-s3.json)."""
    from tests.services import object_store_services

    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 32))
    plan = ChaosPlan(seed=seed, kills=int(os.environ.get("CHAOS_KILLS", "100")), scripted=BETWEEN_WRITES)
    on_s3 = os.environ.get("CHAOS_STORE", "local") == "s3"
    print(f"chaos loop: seed {seed} (replay with CHAOS_SEED={seed}), {plan.kills} kills", flush=True)
    root = Path(os.environ.get("CHAOS_DIR", "test-artifacts/chaos")).resolve()
    subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(parents=True)
    rounds = int(os.environ.get("CHAOS_RACE_ROUNDS", "0"))
    with object_store_services(root / "s3") if on_s3 else contextlib.nullcontext({}) as store:
        report = race_rounds(seed, rounds, root, store) if rounds else run_and_check(plan, root, store)
    name = "chaos-race" if rounds else "chaos"
    out = Path(f"test-artifacts/{name}-s3.json" if on_s3 else f"test-artifacts/{name}.json")
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


def race_rounds(seed: int, rounds: int, root: Path, store: dict[str, str]) -> dict:
    """The platform's jobs racing with no kill: ``rounds`` times RACE_COMMANDS at once on new tables,
    each round's tables against a clean run's. A round whose tables differ (a commit one job made
    and another replaced) is counted, not raised: the figure for a log store that loses commits."""
    results = []
    for number in range(rounds):
        plan = ChaosPlan(seed=seed + number, kills=0)
        started = time.monotonic()
        try:
            run_and_check(plan, root / f"round-{number:03d}", store, RACE_COMMANDS)
            results.append({"round": number, "equal": True})
        except AssertionError as difference:  # ChaosFailure too: a job that failed
            results.append({"round": number, "equal": False, "difference": str(difference)[:2000]})
        results[-1]["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(results[-1]), flush=True)
    commits = os.environ.get("LAKEHOUSE_S3_COMMITS", "conditional") if store else "local"
    unequal = sum(not result["equal"] for result in results)
    return {"seed": seed, "commits": commits, "rounds": rounds, "unequal": unequal, "results": results}


def run_and_check(plan: ChaosPlan, root: Path, store: dict[str, str], commands: dict | None = None) -> dict:
    """The loop under ``root`` (its tables on the S3 server ``store`` names, if any; ``commands``
    its jobs, JOB_COMMANDS by default), then its tables against a clean run's; the loop's figures
    and the checks'."""
    from lakehouse.storage.spark import build_spark_session
    from tests.test_chaos import check_against_clean_run

    log = shared_log(root, store)
    report = ChaosLoop(plan, root / "chaos", log, commands).run()
    spark = build_spark_session(make_settings(root / "session", **store), "chaos-checks")
    report["checks"] = check_against_clean_run(spark, root, log)
    report["store"] = "s3" if store else "local"
    return report


if __name__ == "__main__":
    main()
