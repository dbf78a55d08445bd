# Everything a newcomer needs: `make demo` sets up and runs the lambda loop, `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
UV_VERSION := 0.13.8
STAMP := $(VENV)/.installed
# The Python packages alone: what lint and the JVM-free tests need.
PACKAGES_STAMP := $(VENV)/.packages-installed

.PHONY: setup demo test test-unit test-spark test-rest test-long lint format bench bench-smoke chaos lock clean airflow airflow-stop \
	system-deps test-airflow serve serve-stop kafka kafka-stop cluster cluster-stop s3 s3-stop prometheus prometheus-stop \
	alertmanager alertmanager-stop

# The virtual environment, installed exactly from the lock, plus Spark's Delta JARs in .cache/.
setup: $(STAMP)

# A failed step's log: its end, then its first errors last, where a truncated CI log still shows them
# (a JVM's root cause comes long before the end of its stack traces).
define show_failure
{ tail -n 30 $(1); echo "--- the first errors in $(1):"; grep -E 'Error|Exception' $(1) | grep -v '\[cds' | head -n 5; exit 1; }
endef

$(PACKAGES_STAMP): requirements.lock pyproject.toml
	@bash scripts/system-deps.sh build
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip sync --quiet --compile-bytecode --python $(VENV)/bin/python requirements.lock
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	@touch $(PACKAGES_STAMP)

$(STAMP): $(PACKAGES_STAMP)
	@mkdir -p .cache
	@echo "Resolving Spark's Delta JARs from Maven Central into .cache/ivy (once) ..."
	@$(VENV)/bin/python -m lakehouse.storage.spark > .cache/resolve-jars.log 2>&1 \
		|| $(call show_failure,.cache/resolve-jars.log)
	@tail -n 1 .cache/resolve-jars.log
	@echo "Archiving the classes Spark's jobs load, so that each JVM starts in half the time (once, about a minute) ..."
	@$(VENV)/bin/python -m lakehouse.class_archive > .cache/class-archive.log 2>&1 \
		|| $(call show_failure,.cache/class-archive.log)
	@tail -n 1 .cache/class-archive.log
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/lakehouse demo

# Everything CI runs, tier by tier (docs/development.md gives each tier's budget): style and layering,
# the JVM-free tests in parallel, then the tests that start a JVM or a service. The first two run
# while the JARs resolve and the class archive is written, which leave a core idle (measured on a
# clean clone: the archive's JVM kept 1.2 of the 2 cores busy for 86 s).
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target setup system-deps lint test-unit
	@$(MAKE) --no-print-directory test-rest

# The test workers follow the machine's cores: a JVM-free test keeps one core busy, and the rest
# tier runs one worker more than there are cores (below). CI's machines have 2: 2 and 3 workers.
CORES := $(shell nproc 2>/dev/null || echo 2)
REST_WORKERS := $(shell echo $$(( $(CORES) + 1 )))

# No JVM and no service: every core, in parallel. Under a minute on 2.
test-unit: $(PACKAGES_STAMP)
	$(VENV)/bin/python -m pytest -m unit -n $(CORES) -q

# The in-process Spark tests only (no subprocess JVMs, no Airflow).
test-spark: setup
	$(VENV)/bin/python -m pytest -m "spark and not slow and not airflow"

# Every test that starts a JVM or a service, a file per worker, three at a time on two cores: the
# worker beyond the cores runs while the others wait on Airflow, a port or a subprocess (measured in
# CI: 32m58s with two, 30m12s with three). Each worker has its own session; a module's shared
# set-ups stay on one worker. Files go out longest first (tests/conftest.py), not by xdist's default
# of most tests first.
# --durations: each CI run shows where its minutes go.
test-rest: setup system-deps
	$(VENV)/bin/python -m pytest -m "not unit and not long" -n $(REST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

# Out of make test for CI's budget (docs/development.md, "CI budget"): the loops that make chaos
# repeats at length, once each (the chaos loop's 2 chosen kills), and the drills make chaos runs (a
# hung Airflow scheduler, a chunk's Spark process killed, a backfill racing a correction).
test-long: setup system-deps
	$(VENV)/bin/python -m pytest -m long --durations=15

# ruff (format and lint, 120 columns) and the import contracts in pyproject.toml.
lint: $(PACKAGES_STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# Apply ruff's formatting and safe fixes.
format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Benchmarks against baselines (bench/README.md); results in bench/results/, and each figure appended to
# bench/history.jsonl with the commit measured. Niced: the machine is shared.
bench: setup
	nice -n 10 $(VENV)/bin/python -m bench

# The chaos loop, long (tests/chaos.py): the stream, a backfill, a correction and maintenance at once,
# 100 SIGKILLs (CHAOS_KILLS) at chosen then random moments, then every table against a clean run.
# CHAOS_SEED replays a loop's choices. Figures in test-artifacts/chaos.json. The same loop with its
# tables and checkpoints on the project's S3 server (CHAOS_S3_KILLS kills; chaos-s3.json), and the
# four jobs and a second backfill racing there with no kill, CHAOS_RACE_ROUNDS times
# (chaos-race-s3.json). Then each JVM-free command 1,000 times through the CLI's exit, on local
# tables and on tables in the project's S3 server (tests/test_exit_codes.py; CI runs 50 and 15).
# Then two Spark drivers racing 100 commits each to one s3a:// table, and Spark against delta-rs,
# through each of Spark's S3 log stores: conditional writes, DynamoDB, single-driver
# (tests/s3_commit_race.py; COMMIT_RACE_ROUNDS, COMMIT_RACES; figures in test-artifacts/s3_commits.json).
# Then the drills of the long tier but the chaos loop, run above at length (make test-long's).
# Then the loop across hosts with every host fault it makes (HOST_FAULTS=all; CI makes the worker's cut).
chaos: setup system-deps
	$(VENV)/bin/python -m tests.chaos
	CHAOS_STORE=s3 CHAOS_KILLS=$${CHAOS_S3_KILLS:-30} $(VENV)/bin/python -m tests.chaos
	CHAOS_STORE=s3 CHAOS_RACE_ROUNDS=$${CHAOS_RACE_ROUNDS:-5} $(VENV)/bin/python -m tests.chaos
	$(VENV)/bin/python -m tests.s3_commit_race
	LAKEHOUSE_EXIT_RUNS=1000 LAKEHOUSE_EXIT_S3_RUNS=1000 $(VENV)/bin/python -m pytest -q tests/test_exit_codes.py
	$(VENV)/bin/python -m pytest -q -m long --ignore=tests/test_chaos.py
	HOST_FAULTS=all $(VENV)/bin/python -m pytest -q -s tests/test_across_hosts.py

# Every benchmark at a tiny size, one run each (CI runs the backfill suite's: tests/test_bench_smoke.py).
bench-smoke: setup
	$(VENV)/bin/python -m bench --smoke

# Re-resolve the pinned versions after editing requirements.in.
lock:
	@test -x $(VENV)/bin/uv || { $(PYTHON) -m venv $(VENV) && $(VENV)/bin/python -m pip install --quiet uv==$(UV_VERSION); }
	$(VENV)/bin/uv pip compile --quiet --python-version 3.11 requirements.in -o requirements.lock

clean:
	rm -rf $(VENV) .cache .lakehouse .pytest_cache test-artifacts

# --- Airflow (local, on PostgreSQL): see README "Orchestration with Airflow" ---
# PostgreSQL for Airflow's metadata, Chromium for the UI tests, slapd for the directory login's tests,
# from Debian packages if absent (scripts/system-deps.sh says which and why).
system-deps:
	@bash scripts/system-deps.sh

airflow: setup
	@bash scripts/airflow.sh start

airflow-stop:
	@bash scripts/airflow.sh stop

# The Spark service (docs/sql.md): its metastore in a database of Airflow's PostgreSQL cluster.
serve: setup
	@metastore="$$(bash scripts/airflow.sh metastore)" && eval "$$metastore" && $(VENV)/bin/lakehouse serve

serve-stop:
	@$(VENV)/bin/lakehouse serve --stop

# A Kafka broker for the retained log (docs/operations.md, "The retained log on Kafka"): its JARs from
# Maven Central into .cache/kafka/ once, its data in the home. Prints the address for LAKEHOUSE_KAFKA_BOOTSTRAP.
kafka: setup
	@$(VENV)/bin/lakehouse kafka start

kafka-stop:
	@$(VENV)/bin/lakehouse kafka stop

# An S3-compatible object store on loopback (S3Proxy, one JAR from Maven Central), its objects under
# .lakehouse/s3/data/, and a DynamoDB-compatible server (moto) for Delta's DynamoDB log store.
# Prints the endpoints for LAKEHOUSE_S3_ENDPOINT and LAKEHOUSE_S3_COMMIT_ENDPOINT; its generated keys
# are in .lakehouse/s3/credentials.json.
s3: setup
	@$(VENV)/bin/lakehouse s3 start

s3-stop:
	@$(VENV)/bin/lakehouse s3 stop

# Prometheus on loopback (docs/operations.md, "Metrics and alerts"): scrapes the running streams' metrics
# endpoints and evaluates monitoring/alerts.yml; its data under .lakehouse/prometheus/. Prints its URL.
prometheus: setup system-deps
	@$(VENV)/bin/lakehouse prometheus start

prometheus-stop:
	@$(VENV)/bin/lakehouse prometheus stop

# Alertmanager beside it (docs/operations.md, "Metrics and alerts"): what the alert rules fire, POSTed to
# LAKEHOUSE_ALERT_WEBHOOK_URL (unset: held in its API); its data under .lakehouse/alertmanager/. Prints its URL.
alertmanager: setup system-deps
	@$(VENV)/bin/lakehouse alertmanager start

alertmanager-stop:
	@$(VENV)/bin/lakehouse alertmanager stop

# A Spark standalone cluster (a master, two workers) from pyspark's spark-class; prints its spark:// address.
cluster: setup
	@$(VENV)/bin/lakehouse cluster start

cluster-stop:
	@$(VENV)/bin/lakehouse cluster stop

# The Airflow tests alone: DAG integrity, dag.test() of each DAG, the newcomer's make airflow, and end
# to end on a real Airflow (PostgreSQL, api-server, scheduler, dag-processor, triggerer) with a browser test.
test-airflow: setup system-deps
	$(VENV)/bin/python -m pytest -m airflow
# --- end Airflow ---
