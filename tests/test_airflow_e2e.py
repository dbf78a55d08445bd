"""End to end on a real Airflow (PostgreSQL, api-server, scheduler, dag-processor, triggerer, LocalExecutor)
started by the project's own script, driven through REST API v2 with a JWT: backfills from the
trigger parameters, Airflow's own backfills of the scheduled batch layer, authentication and roles
(the FAB auth manager, its database users and a directory served by slapd, which the same start
brings up), validation, a chunk's Spark process killed mid-write, and PostgreSQL restarted during a run."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lakehouse.dataflow.fingerprints import parse_bronze_fingerprint
from lakehouse.dataflow.pipelines import get_pipeline
from lakehouse.generator import GeneratorConfig, generate
from lakehouse.layers.speed import run_speed_layer
from lakehouse.location import local_path
from lakehouse.ops.airflow_client import FINISHED, AirflowClient, AirflowDeployment
from lakehouse.storage.catalog import BACKFILL_RUNS, BATCH_COVERAGE, pipeline_tables
from lakehouse.vocabulary import RunStatus
from tests import sensor_project as sensors
from tests.airflow_env import PROJECT
from tests.conftest import make_settings
from tests.oracle import gold_rows, run_oracle, truth
from tests.services import free_port
from tests.test_dags import HOUR0, iso, read

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.services]
PIPELINE = get_pipeline("toll_traffic")
TABLES = pipeline_tables(PIPELINE)
# Generous: on a shared 2-core machine a Spark job under spark-submit takes from 30 s to several minutes.
RUN_TIMEOUT = 1200
# PostgreSQL runs as its own user: its cluster must be under a folder that user can enter.
AIRFLOW_HOME = PROJECT / ".cache" / "airflow-e2e"


class Airflow(AirflowClient):
    """The platform's REST client, able to sign in as the users and people this deployment made."""

    def as_user(self, username: str) -> Airflow:
        """A client signed in as another of the users `make airflow` creates, with its generated password."""
        return Airflow(self.base_url, generated_passwords()[username], username)

    def as_person(self, uid: str) -> Airflow:
        """A client signed in as one of the test directory's people, with their directory password."""
        return Airflow(self.base_url, directory_passwords()[uid], uid)

    def wait_for(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT) -> str:
        return super().wait_for(dag_id, run_id, timeout)


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    """Airflow started by scripts/airflow.sh on free ports, over a lakehouse with two streamed hours."""
    lakehouse_home = AIRFLOW_HOME / "lakehouse"
    airflow = AirflowDeployment(
        AIRFLOW_HOME,
        {
            "LAKEHOUSE_HOME": str(lakehouse_home),
            # Directory login, against the test directory the script serves with slapd: one start
            # brings up both, and the platform's database users still get API tokens.
            "AIRFLOW_LOGIN": "directory",
            "AIRFLOW_LDAP_PORT": str(free_port()),
            "LAKEHOUSE_PIPELINES": "toll_traffic",
            "LAKEHOUSE_SPARK_CONN": json.dumps({"conn_type": "spark", "host": "local[1]"}),
            # A project of the tests' own, the examples' copy: a test adds a pipeline to it while Airflow runs.
            "LAKEHOUSE_PROJECT": str(AIRFLOW_HOME / "project"),
        },
    )
    airflow.clear()
    sensors.project_copy(AIRFLOW_HOME / "project", PROJECT)
    settings = make_settings(lakehouse_home)
    generate(
        settings,
        GeneratorConfig(
            events=1200, seed=5, start=HOUR0, rate=0.18, late_fraction=0.05, late_delay="3m", events_per_file=150
        ),
    )
    run_speed_layer(spark, settings, PIPELINE, available_now=True)
    oracle = run_oracle(local_path(settings.pipeline_log_uri(PIPELINE.name)), timedelta(minutes=2))
    started = time.monotonic()
    try:
        printed = airflow.start()
        print(f"\nAirflow started in {time.monotonic() - started:.0f}s")
        password = generated_passwords()["admin"]
        assert "Generated admin password (shown once; kept in" in printed and password in printed
        assert all(f"Generated {uid} password" in printed for uid in directory_passwords())
        client = Airflow(airflow.base_url, password)
        wait_for_dags(client)
        wait_for_healthy_scheduler(int(airflow.env["AIRFLOW_HEALTH_PORT"]))
        yield client, settings, oracle
    finally:
        airflow.stop()


def test_airflows_metrics_reach_prometheus_format_through_the_statsd_exporter(live):
    """Airflow's own StatsD metrics, from its running scheduler, at the address the exporter names."""
    import urllib.request

    _, settings, _ = live
    [target] = json.loads((settings.metrics_dir() / "airflow" / "airflow.json").read_text())
    [address] = target["targets"]
    heartbeats = "airflow_scheduler_executor_heartbeat_duration_count"  # a summary: a timer in StatsD
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
            samples = dict(line.rsplit(" ", 1) for line in answer.read().decode().splitlines() if line[:1] != "#")
        if heartbeats in samples or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert float(samples.get(heartbeats, 0)) > 0 and float(samples["airflow_job_start_total"]) >= 1, samples


def wait_for_dags(client: AirflowClient, timeout: float = 300) -> None:
    client.wait_for_dags({"lakehouse_backfill", "lakehouse_batch_layer"}, timeout)


def wait_for_healthy_scheduler(port: int, timeout: float = 120) -> None:
    """The scheduler's health check answers 200: the liveness probe scripts/supervise.sh restarts a
    hung scheduler by (scripts/airflow.sh) reaches it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    raise AssertionError(f"the scheduler's health check on port {port} never answered 200")


def test_requests_without_a_token_are_refused(live):
    client, _, _ = live
    assert client.status_of("GET", "/api/v2/dags", auth=False)[0] == 401
    assert client.status_of("POST", "/api/v2/dags/lakehouse_backfill/dagRuns", {"conf": {}}, auth=False)[0] == 401


def generated_passwords() -> dict[str, str]:
    """The platform's database users' passwords `make airflow` generated (mode 600)."""
    return json.loads((AIRFLOW_HOME / "passwords.json").read_text())


def directory_passwords() -> dict[str, str]:
    """The test directory's people's passwords, generated by the same start (mode 600)."""
    return json.loads((AIRFLOW_HOME / "directory_passwords.json").read_text())


def test_every_airflow_process_the_triggerer_included_reports_healthy(live):
    """Airflow's own health check names each of its processes by its heartbeat in the database: the
    triggerer's among them, which deferred tasks wait on (the scheduler alone would leave them
    deferred for ever). No credentials needed: a load balancer's probe asks the same."""
    client, _, _ = live
    status = {}
    for _ in range(60):
        with urllib.request.urlopen(f"{client.base_url}/api/v2/monitor/health", timeout=10) as response:
            health = json.loads(response.read())
        status = {process: health[process]["status"] for process in health}
        if set(status.values()) == {"healthy"}:
            break
        time.sleep(2)
    assert status == dict.fromkeys(("metadatabase", "scheduler", "triggerer", "dag_processor"), "healthy"), health


def test_airflows_processes_reach_their_database_over_tls_only(live):
    """Airflow's database takes TCP connections over TLS only, and every connection Airflow's
    processes hold (scheduler, api-server, dag-processor) is one."""
    import psycopg

    env_sh = (AIRFLOW_HOME / "env.sh").read_text()
    url = re.search(r"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='([^']+)'", env_sh)[1]
    assert url.endswith(f"sslmode=verify-full&sslrootcert={AIRFLOW_HOME}/tls/ca.crt"), url
    conninfo = url.replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(conninfo) as connection:
        plain, encrypted = connection.execute(
            "SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a "
            "JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'airflow' AND a.client_addr IS NOT NULL "
            "AND a.pid <> pg_backend_pid()"
        ).fetchone()
    assert plain == 0 and encrypted >= 2, (plain, encrypted)
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(conninfo.split("?")[0] + "?sslmode=disable")


def test_a_viewer_reads_runs_but_cannot_trigger_clear_or_mark_them_and_an_operator_can(live):
    client, _, _ = live
    viewer, operator = client.as_user("viewer"), client.as_user("operator")
    conf = {"pipeline": "toll_traffic", "start": iso(HOUR0), "end": iso(HOUR0 + timedelta(hours=1)), "dry_run": True}
    trigger = ("POST", "/api/v2/dags/lakehouse_backfill/dagRuns", {"logical_date": None, "conf": conf})

    assert viewer.status_of("GET", "/api/v2/dags/lakehouse_backfill/dagRuns")[0] == 200
    assert viewer.status_of(*trigger)[0] == 403
    run_id = operator.trigger("lakehouse_backfill", conf)
    run = client.run_path("lakehouse_backfill", run_id)
    assert viewer.status_of("POST", f"{run}/clear", {"dry_run": True})[0] == 403
    assert viewer.status_of("PATCH", run, {"state": "failed"})[0] == 403
    assert operator.status_of("POST", f"{run}/clear", {"dry_run": True})[0] == 200
    assert operator.status_of("PATCH", run, {"state": "failed"})[0] == 200
    assert viewer.request("GET", run)["state"] == "failed"
    assert all(len(password) >= 24 for password in generated_passwords().values())  # generated, never defaults


def test_directory_people_get_tokens_with_the_roles_of_their_groups(live):
    """Each person of the test directory signs in through /auth/token with their directory password
    and acts with the role AUTH_ROLES_MAPPING gives their group: vera (viewers) reads and is refused
    every write, otto (operators) edits a pool, ada (admins) alone lists FAB's users."""
    client, _, _ = live
    ada, otto, vera = (client.as_person(uid) for uid in ("ada", "otto", "vera"))
    conf = {"pipeline": "toll_traffic", "start": iso(HOUR0), "end": iso(HOUR0 + timedelta(hours=1)), "dry_run": True}
    pool = {"name": "directory_test", "slots": 1, "include_deferred": False}

    assert vera.status_of("GET", "/api/v2/dags/lakehouse_backfill/dagRuns")[0] == 200
    assert (
        vera.status_of("POST", "/api/v2/dags/lakehouse_backfill/dagRuns", {"logical_date": None, "conf": conf})[0]
        == 403
    )
    assert vera.status_of("POST", "/api/v2/pools", pool)[0] == 403
    assert otto.status_of("POST", "/api/v2/pools", pool)[0] == 200
    assert otto.status_of("DELETE", "/api/v2/pools/directory_test")[0] == 200
    assert otto.status_of("GET", "/auth/fab/v1/users")[0] == 403
    assert ada.status_of("GET", "/auth/fab/v1/users")[0] == 200
    registered = {
        user["username"]: [role["name"] for role in user["roles"]]
        for user in ada.request("GET", "/auth/fab/v1/users")["users"]
    }
    # FAB also gives each registered person its registration role, Public, which grants nothing.
    assert {uid: set(registered[uid]) - {"Public"} for uid in ("ada", "otto", "vera")} == {
        "ada": {"Admin"},
        "otto": {"Op"},
        "vera": {"Viewer"},
    }
    assert ada.request("GET", "/auth/fab/v1/roles/Public")["actions"] == []


def test_a_wrong_or_unknown_password_gets_no_token_and_says_so(live):
    client, _, _ = live
    for username, password in (("vera", "not-" + directory_passwords()["vera"]), ("viewer", "wrong"), ("nobody", "x")):
        status, detail = client.status_of(
            "POST", "/auth/token", {"username": username, "password": password}, auth=False
        )
        assert (status, json.loads(detail)["detail"]) == (401, "Invalid credentials"), (username, status, detail)


# Wrong passwords sent to /auth/token for one name, by clients at once, as fast as Airflow answers.
GUESSES, GUESSERS = 1000, 8


def test_a_thousand_wrong_passwords_for_one_name_are_refused_mostly_unchecked_and_others_sign_in(live):
    """After a name's free failures, /auth/token checks its next password only once a wait has
    passed (lakehouse.ops.failed_logins): a try within the wait gets 429 and the wait left, unchecked.
    Guessing from 8 clients at once buys no more checks than guessing in turn, the name's case buys
    no new allowance, and meanwhile another user gets a token and the API answers."""
    from concurrent.futures import ThreadPoolExecutor

    from lakehouse.ops.failed_logins import FREE

    client, _, _ = live

    def guess(number: int) -> tuple[int, str]:
        name = "Guessed" if number % 2 else "guessed"  # FAB matches names without regard to case
        return client.status_of("POST", "/auth/token", {"username": name, "password": f"guess-{number}"}, auth=False)

    with ThreadPoolExecutor(GUESSERS) as guessers:
        answers = guessers.map(guess, range(GUESSES))
        operator = client.as_user("operator")  # a token while the guessing goes on
        assert operator.status_of("GET", "/api/v2/dags/lakehouse_backfill/dagRuns")[0] == 200
        answers = list(answers)
    checked = [detail for status, detail in answers if status == 401]
    held_back = [json.loads(detail)["detail"] for status, detail in answers if status == 429]
    assert len(checked) + len(held_back) == GUESSES, Counter(status for status, _ in answers)
    print(f"\nof {GUESSES} wrong passwords, {len(checked)} checked, {len(held_back)} refused unchecked")
    assert FREE <= len(checked) <= FREE + 5, len(checked)
    wait = re.compile(r"too many failed logins for user guessed in a row: the next is checked in \d+ s")
    assert all(wait.fullmatch(detail) for detail in held_back), held_back[:3]
    assert client.status_of("GET", "/api/v2/dags")[0] == 200


def test_the_directory_shows_its_people_no_password_and_strangers_nothing(live):
    """The test directory's access rules: a signed-in person reads the people and their groups but
    no password, and an anonymous client reads nothing."""
    import ldap

    uri = re.search(r"AUTH_LDAP_SERVER = '([^']+)'", (AIRFLOW_HOME / "webserver_config.py").read_text())[1]
    people = "ou=people,dc=lakehouse,dc=test"
    vera = ldap.initialize(uri)
    vera.simple_bind_s(f"uid=vera,{people}", directory_passwords()["vera"])
    found = vera.search_s(people, ldap.SCOPE_ONELEVEL, "(uid=*)", ["uid", "memberOf", "userPassword"])
    assert {entry["uid"][0].decode(): entry["memberOf"][0].decode().split(",")[0] for _, entry in found} == {
        "ada": "cn=airflow-admins",
        "otto": "cn=airflow-operators",
        "vera": "cn=airflow-viewers",
    }
    assert not any("userPassword" in entry for _, entry in found)
    with pytest.raises(ldap.NO_SUCH_OBJECT):
        ldap.initialize(uri).search_s(people, ldap.SCOPE_ONELEVEL, "(uid=*)")


def resigned(token: str, key: str, **claims) -> str:
    """The token's own claims, changed by ``claims``, signed again with ``key`` and its algorithm."""
    import jwt

    algorithm = jwt.get_unverified_header(token)["alg"]
    return jwt.encode({**jwt.decode(token, options={"verify_signature": False}), **claims}, key, algorithm)


def test_an_expired_or_forged_token_is_refused(live):
    """A token signed with Airflow's own secret is accepted until it expires: past its expiry it
    gets 401 "Token Expired". One signed with another key, and an unsigned one, get Airflow's
    answer to a token it cannot verify: 403 "Invalid JWT token" (not a permission's 403: the UI
    sends its holder back to the sign-in page on that detail, apache/airflow#47791)."""
    client, _, _ = live
    secret = _secrets()["JWT_SECRET"]
    now = int(time.time())
    viewer = client.as_user("viewer")
    real = viewer.token

    def answer_to(token: str) -> tuple[int, str]:
        viewer.token = token
        status, body = viewer.status_of("GET", "/api/v2/dags/lakehouse_backfill/dagRuns")
        return status, json.loads(body)["detail"] if body else ""

    assert answer_to(resigned(real, secret, exp=now + 600)) == (200, "")  # the re-signing itself is sound
    assert answer_to(resigned(real, secret, iat=now - 7200, nbf=now - 7200, exp=now - 60)) == (401, "Token Expired")
    assert answer_to(resigned(real, "not-" + secret, exp=now + 600)) == (403, "Invalid JWT token")
    _, payload, _ = real.split(".")
    unsigned = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').decode().rstrip("=") + f".{payload}."
    assert answer_to(unsigned) == (403, "Invalid JWT token")


def test_bad_parameters_get_a_validation_error_and_create_no_run(live):
    client, _, _ = live
    before = len(client.runs("lakehouse_backfill"))
    bad = {
        "pipeline": "no_such_pipeline",
        "start": iso(HOUR0),
        "end": iso(HOUR0 + timedelta(hours=1)),
        "source": "bronze",
        "chunk": "1h",
        "reprocess": "skip",
        "dry_run": False,
    }
    status, detail = client.status_of(
        "POST", "/api/v2/dags/lakehouse_backfill/dagRuns", {"logical_date": None, "conf": bad}
    )
    assert status == 400 and "Invalid input for param pipeline" in detail and "no_such_pipeline" in detail
    status, detail = client.status_of(
        "POST",
        "/api/v2/dags/lakehouse_backfill/dagRuns",
        {"logical_date": None, "conf": {**bad, "pipeline": "toll_traffic", "start": "last tuesday"}},
    )
    assert status == 400 and "Invalid input for param start" in detail
    assert len(client.runs("lakehouse_backfill")) == before


# How long PostgreSQL stays down in the restart test: long enough for the scheduler's loop, the
# api-server and the running task's heartbeats all to meet a refused connection.
DATABASE_DOWNTIME_S = 20


def restart_postgres(down_for: float) -> None:
    """Stop Airflow's PostgreSQL as its administrator would (fast mode: every open session is cut),
    and start it again ``down_for`` seconds later with the options it ran with."""
    pg_ctl = str(sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1])
    as_owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []  # as scripts/airflow.sh runs it
    data = AIRFLOW_HOME / "postgres"
    options = shlex.split((data / "postmaster.opts").read_text())[3:]  # after the binary and its -D
    control = [*as_owner, pg_ctl, "-D", str(data), "-w"]
    subprocess.run([*control, "-m", "fast", "stop"], check=True, capture_output=True, timeout=120)
    time.sleep(down_for)
    start = [*control, "-l", str(data / "server.log"), "-o", shlex.join(options), "start"]
    subprocess.run(start, check=True, capture_output=True, timeout=120)


def wait_for_spark_job(label: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    while not spark_jobs_of(label):
        assert time.monotonic() < deadline, f"no Spark job of {label} started"
        time.sleep(0.2)


def test_a_backfill_triggered_through_the_api_survives_a_database_restart_and_fills_the_batch_layer_once(spark, live):
    client, settings, oracle = live
    client.unpause("lakehouse_backfill")
    start, end = HOUR0, HOUR0 + timedelta(hours=2)
    batch_log = local_path(TABLES.batch.uri(settings)) / "_delta_log"
    versions_before = len(list(batch_log.glob("*.json")))
    run_id = client.as_user("operator").trigger(
        "lakehouse_backfill",
        {
            "pipeline": "toll_traffic",
            "start": iso(start),
            "end": iso(end),
            "source": "bronze",
            "chunk": "1h",
            "reprocess": "skip",
            "dry_run": False,
        },
    )
    # PostgreSQL goes down and comes back while the first chunk's Spark job runs: the scheduler,
    # the api-server and the task lose their connections mid-run.
    wait_for_spark_job(f"{run_id}|{iso(start)}")
    restart_postgres(down_for=DATABASE_DOWNTIME_S)
    assert client.wait_for("lakehouse_backfill", run_id) == "success"
    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, start, end)
    assert len(list(batch_log.glob("*.json"))) - versions_before == 2, "each chunk commits once"
    tries = [t["try_number"] for t in client.task_instances("lakehouse_backfill", run_id)]
    print(f"tries of its tasks: {tries}")
    summary = client.xcom("lakehouse_backfill", run_id, "summarise")
    assert (summary["chunks_planned"], summary["chunks_recomputed"], summary["chunks_skipped"]) == (2, 2, 0)
    assert summary["rows_written"] == len(truth(oracle, start, end))
    runs = read(spark, settings, BACKFILL_RUNS).where(F.col("label").startswith(f"{run_id}|")).collect()
    assert {r.triggered_by for r in runs} == {"operator"}
    # Each chunk is recomputed by exactly one successful try. A chunk's task that lost the database
    # is tried again, and its first try left one more record: a failure if it was stopped before its
    # commit, or, if it got past it, a skip by the next try, which finds its inputs unchanged
    # (reprocess = skip) and writes nothing.
    succeeded = [r for r in runs if r.status == RunStatus.SUCCEEDED and r.chunks_skipped == 0]
    recomputed = sorted(r.label for r in succeeded)
    assert recomputed == [f"{run_id}|{iso(start)}", f"{run_id}|{iso(start + timedelta(hours=1))}"], runs
    chunk_tries = [t["try_number"] for t in client.task_instances("lakehouse_backfill", run_id)
                   if t["task_id"] == "recompute_chunk"]  # fmt: skip
    others = [r for r in runs if r not in succeeded]
    assert len(others) == sum(chunk_tries) - len(chunk_tries), (runs, chunk_tries)
    assert all(r.status == RunStatus.FAILED or r.chunks_skipped == 1 for r in others), others
    assert_covered_hour_by_hour(spark, settings, succeeded, start, end)


def assert_covered_hour_by_hour(spark, settings, runs, start: datetime, end: datetime) -> None:
    """The backfill runs ``runs`` cover ``[start, end)`` in the batch layer an hour a run, each
    with the bronze version it read."""
    coverage = read(spark, settings, BATCH_COVERAGE).join(
        spark.createDataFrame([(r.run_id,) for r in runs], "run_id string"), on="run_id"
    )
    chunks = sorted((c.range_start, c.range_end, c.input_fingerprint) for c in coverage.collect())
    hours = int((end - start) / timedelta(hours=1))
    assert [(chunk_start, chunk_end) for chunk_start, chunk_end, _ in chunks] == [
        (start + timedelta(hours=h), start + timedelta(hours=h + 1)) for h in range(hours)
    ]
    assert all(parse_bronze_fingerprint(fingerprint) for _, _, fingerprint in chunks), chunks


def test_an_airflow_backfill_of_the_batch_layer_recomputes_each_hourly_interval(spark, live):
    client, settings, oracle = live
    client.unpause("lakehouse_batch_layer")
    backfill = client.request(
        "POST",
        "/api/v2/backfills",
        {
            "dag_id": "lakehouse_batch_layer",
            "from_date": iso(HOUR0),
            "to_date": iso(HOUR0 + timedelta(hours=1)),
            "reprocess_behavior": "completed",
            "max_active_runs": 1,
        },
    )
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        runs = [r for r in client.runs("lakehouse_batch_layer") if r["run_type"] == "backfill"]
        if runs and all(r["state"] in FINISHED for r in runs):
            break
        time.sleep(3)
    runs = [r for r in client.runs("lakehouse_batch_layer") if r["run_type"] == "backfill"]
    intervals = sorted((r["data_interval_start"], r["data_interval_end"]) for r in runs)
    assert backfill["dag_id"] == "lakehouse_batch_layer" and [r["state"] for r in runs] == ["success"] * len(runs)
    assert [i[0][:13] for i in intervals] == [iso(HOUR0)[:13], iso(HOUR0 + timedelta(hours=1))[:13]]
    coverage = read(spark, settings, BATCH_COVERAGE).join(
        read(spark, settings, BACKFILL_RUNS).select("run_id", "label"), on="run_id", how="inner"
    )
    by_run = {r.label: (r.range_start, r.range_end) for r in coverage.collect() if r.label.startswith("backfill__")}
    assert sorted(by_run.values()) == [
        (HOUR0, HOUR0 + timedelta(hours=1)),
        (HOUR0 + timedelta(hours=1), HOUR0 + timedelta(hours=2)),
    ]
    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, HOUR0, HOUR0 + timedelta(hours=2))


def spark_jobs_of(label: str) -> list[int]:
    """Pids of spark-submit driver JVMs recomputing this chunk (their command line carries the label)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"java") and label.encode() in command:
            pids.append(int(proc.name))
    return pids


def table_data_files(table_dir):
    """The Parquet files a write adds to a Delta table (in its partition folders), not the log's checkpoints."""
    return {path for path in table_dir.rglob("*.parquet") if "_delta_log" not in path.parts}


# A drill: make chaos runs it (make test-long), CI does not (docs/development.md, "CI budget"); the
# chaos loop kills backfills mid-write a hundred times, and CI's database restart retries a chunk.
@pytest.mark.long
def test_a_chunk_whose_spark_process_is_killed_mid_write_is_retried_to_the_clean_result(spark, live):
    client, settings, oracle = live
    start, end = HOUR0, HOUR0 + timedelta(hours=1)
    batch_dir = local_path(TABLES.batch.uri(settings))
    data_files_before = table_data_files(batch_dir)
    version_before = len(list((batch_dir / "_delta_log").glob("*.json")))
    run_id = client.trigger(
        "lakehouse_backfill",
        {
            "pipeline": "toll_traffic",
            "start": iso(start),
            "end": iso(end),
            "source": "bronze",
            "chunk": "1h",
            "reprocess": "redo",
            "dry_run": False,
        },
    )
    label = f"{run_id}|{iso(start)}"
    # Wait until the chunk's JVM has written a data file of its new version, then SIGKILL it.
    killed_before_commit = None
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and killed_before_commit is None:
        pids = spark_jobs_of(label)
        if pids and table_data_files(batch_dir) - data_files_before:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed_before_commit = len(list((batch_dir / "_delta_log").glob("*.json"))) == version_before
        time.sleep(0.05)
    assert killed_before_commit is not None, "the chunk's Spark job never started writing"
    assert client.wait_for("lakehouse_backfill", run_id) == "success"
    chunk = [t for t in client.task_instances("lakehouse_backfill", run_id) if t["task_id"] == "recompute_chunk"]
    assert [t["try_number"] for t in chunk] == [2], "the killed attempt was retried once"
    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, HOUR0, HOUR0 + timedelta(hours=2))
    print(f"\nkilled before the chunk's commit: {killed_before_commit}")


ARTIFACTS = PROJECT / "test-artifacts"


def pick_date_time(page, field_index: int, moment) -> None:
    """Fill one of the trigger form's date-time pickers (0 is the logical date) through its popover."""
    page.get_by_test_id("datetime-input").nth(field_index).click()
    popover = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    popover.get_by_placeholder("YYYY/MM/DD").fill(moment.strftime("%Y/%m/%d"))
    popover.get_by_placeholder("HH:mm").fill(moment.strftime("%H:%M"))
    page.get_by_role("dialog").get_by_text("Trigger Dag").click()  # closes the popover, keeps the dialog
    expected = moment.strftime("%b %d, %Y %H:%M")
    page.get_by_test_id("datetime-input").nth(field_index).get_by_text(expected).wait_for(
        state="attached", timeout=10_000
    )


def sign_in(page, client: Airflow, password: str) -> None:
    """Fill FAB's sign-in form (the directory checks the password) and submit it."""
    page.goto(client.base_url + "/")
    page.fill("input[name=username]", client.username)
    page.fill("input[name=password]", password)
    page.locator("input[type=submit], button[type=submit]").first.click()


def open_the_backfill_dag(page, client: Airflow) -> None:
    """Sign in as the client's user and open the backfill DAG's page."""
    sign_in(page, client, client.password)
    page.get_by_text("Dags").first.wait_for(timeout=60_000)
    page.goto(client.base_url + "/dags/lakehouse_backfill")


def fill_the_trigger_form(page, client: Airflow, start, end) -> None:
    """Sign in, open the backfill DAG's trigger form, and fill the range and reprocess=redo."""
    open_the_backfill_dag(page, client)
    page.get_by_role("button", name="Trigger").first.click()
    page.get_by_text("Run Parameters").wait_for(timeout=30_000)
    pick_date_time(page, 1, start)
    pick_date_time(page, 2, end)
    # The form's combo boxes: pipeline, source, chunk, reprocess.
    reprocess = page.get_by_role("dialog").locator("input[role=combobox]").nth(3)
    reprocess.fill("redo")
    reprocess.press("Enter")


def test_a_user_triggers_a_backfill_from_the_ui_form_and_sees_it_succeed(spark, live):
    from playwright.sync_api import expect, sync_playwright

    client, settings, oracle = live
    client.unpause("lakehouse_backfill")
    before = {r["dag_run_id"] for r in client.runs("lakehouse_backfill")}
    start, end = HOUR0 + timedelta(hours=1), HOUR0 + timedelta(hours=2)
    ARTIFACTS.mkdir(exist_ok=True)
    began = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            fill_the_trigger_form(page, client.as_person("otto"), start, end)
            page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            # The new run appears; open it and wait until the UI shows it succeeded.
            deadline = time.monotonic() + RUN_TIMEOUT
            while not (new := {r["dag_run_id"] for r in client.runs("lakehouse_backfill")} - before):
                assert time.monotonic() < deadline, "the form created no run"
                time.sleep(1)
            run_id = new.pop()
            page.goto(f"{client.base_url}/dags/lakehouse_backfill/runs/{urllib.parse.quote(run_id, safe='')}")
            while client.state("lakehouse_backfill", run_id) not in FINISHED:
                assert time.monotonic() < deadline, "the run did not finish"
                time.sleep(3)
            page.reload()
            expect(page.get_by_text("success", exact=False).first).to_be_visible(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "lakehouse_backfill_triggered_from_ui.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "lakehouse_backfill_ui_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    print(f"\nbrowser flow took {time.monotonic() - began:.0f}s")
    conf = client.request("GET", client.run_path("lakehouse_backfill", run_id))["conf"]
    assert conf["start"].startswith(start.strftime("%Y-%m-%dT%H:%M")) and conf["reprocess"] == "redo", conf
    assert client.state("lakehouse_backfill", run_id) == "success"
    assert gold_rows(read(spark, settings, TABLES.batch)) == truth(oracle, HOUR0, HOUR0 + timedelta(hours=2))


def test_a_viewer_who_presses_trigger_in_the_ui_is_refused_and_no_run_is_created(live):
    """A directory person of the viewers group signs in to the UI (a wrong password first, which the
    form refuses with its message). Airflow 3.3's UI shows the Trigger button to every role
    (apache/airflow#57966); what a viewer gets from it is the API's refusal, shown in the form, and no run."""
    from playwright.sync_api import expect, sync_playwright

    client, _, _ = live
    viewer = client.as_person("vera")
    before = len(client.runs("lakehouse_backfill"))
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            sign_in(page, viewer, "not-" + viewer.password)
            expect(page.get_by_text("Invalid login. Please try again.")).to_be_visible(timeout=30_000)
            open_the_backfill_dag(page, viewer)
            page.get_by_role("button", name="Trigger").first.click()
            page.get_by_text("Run Parameters").wait_for(timeout=30_000)
            page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            expect(page.get_by_text("You do not have permission to perform this action")).to_be_visible(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "lakehouse_backfill_trigger_refused_for_viewer.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "lakehouse_backfill_viewer_failure.png"), full_page=True)
            print(
                page.get_by_role("dialog").inner_text()
                if page.get_by_role("dialog").count()
                else page.inner_text("body")
            )
            raise
        finally:
            browser.close()
    assert len(client.runs("lakehouse_backfill")) == before


def _secrets() -> dict[str, str]:
    """What `make airflow` generated and must never show: database password, JWT and API secrets,
    Fernet key, the directory administrator's password, and the users' and people's passwords."""
    lines = (AIRFLOW_HOME / "secrets.env").read_text().splitlines()
    generated = {name: value.strip("'") for name, value in (line.split("=", 1) for line in lines if "=" in line)}
    users = generated_passwords() | directory_passwords()
    return generated | {f"{user}'s password": password for user, password in users.items()}


def _task_outputs(client: Airflow) -> dict[str, str]:
    """Each task instance's rendered template fields and return value, as text, by task."""
    outputs = {}
    for run in client.runs("lakehouse_backfill"):
        for ti in client.task_instances("lakehouse_backfill", run["dag_run_id"]):
            name = f"{run['dag_run_id']} {ti['task_id']}[{ti['map_index']}]"
            outputs[f"rendered fields of {name}"] = json.dumps(ti.get("rendered_fields"))
            path = client.run_path("lakehouse_backfill", run["dag_run_id"])
            path += f"/taskInstances/{ti['task_id']}/xcomEntries/return_value?map_index={ti['map_index']}"
            status, _ = client.status_of("GET", path)
            if status == 200:
                outputs[f"XCom of {name}"] = json.dumps(client.request("GET", path)["value"])
    return outputs


def test_no_secret_appears_in_task_logs_process_logs_xcoms_or_rendered_templates(live):
    client, _, _ = live
    files = [p for folder in ("logs", "process-logs") for p in (AIRFLOW_HOME / folder).rglob("*") if p.is_file()]
    texts = {str(path): path.read_text(errors="replace") for path in files} | _task_outputs(client)
    # The module's backfills ran before this test: there are task logs and XComs to search.
    assert any("recompute_chunk" in name for name in texts) and any(name.startswith("XCom") for name in texts)

    leaks = [(secret, where) for secret, value in _secrets().items() for where, text in texts.items() if value in text]

    assert not leaks


def scheduler_process(supervisor: int) -> int:
    """The pid of the `airflow scheduler` process its supervisor (scripts/supervise.sh) runs now."""
    children = subprocess.run(
        ["pgrep", "-P", str(supervisor), "-f", "airflow scheduler"], capture_output=True, text=True
    )
    return int(children.stdout.split()[0])


# A drill: make chaos runs it (make test-long), CI does not (docs/development.md, "CI budget").
# After the tests that need the scheduler: it freezes it for a minute. SIGSTOP stands in for the hang
# Airflow 3.3.2 falls into when its database goes away mid-task (docs/airflow.md, "A database
# restart"): a process that stays up and schedules nothing.
@pytest.mark.long
def test_a_hung_scheduler_is_restarted_by_its_liveness_probe_and_runs_what_was_triggered_meanwhile(live):
    client, _, _ = live
    client.unpause("lakehouse_backfill")
    supervisor = int((AIRFLOW_HOME / "run" / "scheduler.pid").read_text())
    hung = scheduler_process(supervisor)
    os.kill(hung, signal.SIGSTOP)
    try:
        conf = {"pipeline": "toll_traffic", "start": iso(HOUR0), "end": iso(HOUR0 + timedelta(hours=1)),
                "source": "bronze", "chunk": "1h", "reprocess": "skip", "dry_run": True}  # fmt: skip
        run_id = client.as_user("operator").trigger("lakehouse_backfill", conf)
        assert client.wait_for("lakehouse_backfill", run_id, timeout=600) == "success"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung, signal.SIGCONT)
    log = (AIRFLOW_HOME / "process-logs" / "scheduler.log").read_text()
    assert "failed its liveness check 4 times in a row; stopping it" in log
    assert scheduler_process(supervisor) != hung


def backfill_choices(client: Airflow) -> list[str]:
    return client.request("GET", "/api/v2/dags/lakehouse_backfill/details")["params"]["pipeline"]["schema"]["enum"]


def test_a_pipeline_added_to_the_project_is_backfilled_through_the_api_to_its_oracle(spark, live, monkeypatch):
    """A pipeline declared only in the running Airflow's project appears in the form's list after the
    dag-processor's next parse; its events go in through `lakehouse ingest`, and a backfill triggered
    through the REST API fills its batch layer with the oracle's windows."""
    from tests.test_own_pipeline import assert_served_equals, ingest, served

    client, _, _ = live
    project = AIRFLOW_HOME / "project"
    assert sensors.NAME not in backfill_choices(client)
    sensors.add_to_project(project)
    monkeypatch.setenv("LAKEHOUSE_PROJECT", str(project))
    settings = make_settings(AIRFLOW_HOME / "lakehouse", LAKEHOUSE_PROJECT=str(project))
    # Within the log's retention, which the backfill form checks the range against.
    first_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    on_time, _ = sensors.events(count=120, start=first_hour + timedelta(hours=1))
    ingest(AIRFLOW_HOME / "lakehouse", sensors.as_lines(on_time))
    pipeline = get_pipeline(sensors.NAME)
    run_speed_layer(spark, settings, pipeline, available_now=True)
    deadline = time.monotonic() + 120
    while sensors.NAME not in backfill_choices(client):
        assert time.monotonic() < deadline, "the dag-processor never listed the new pipeline"
        time.sleep(3)
    client.unpause("lakehouse_backfill")
    start, end = (iso(moment.replace(tzinfo=None)) for moment in (first_hour, first_hour + timedelta(hours=2)))
    conf = {"pipeline": sensors.NAME, "start": start, "end": end, "source": "bronze", "chunk": "1h"}
    run_id = client.as_user("operator").trigger("lakehouse_backfill", conf)
    assert client.wait_for("lakehouse_backfill", run_id) == "success"
    truth = sensors.oracle(on_time)
    rows = served(spark, settings, pipeline)
    assert {row.source for row in rows.values()} == {"batch"}
    assert_served_equals(rows, truth)
