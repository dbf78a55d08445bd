#!/usr/bin/env bash
# Run Airflow locally on PostgreSQL with this checkout's dags/ and LocalExecutor.
#
#   scripts/airflow.sh start   # install PostgreSQL if absent, start it, migrate, create the users, start
#                              # api-server, scheduler, dag-processor and triggerer; print generated
#                              # passwords once
#   scripts/airflow.sh stop    # stop what start started (the test directory's slapd too)
#   scripts/airflow.sh env     # print the environment the processes run with (source it for `airflow ...`)
#   scripts/airflow.sh metastore  # start PostgreSQL only, with the Spark service's metastore database;
#                              # print the LAKEHOUSE_METASTORE_* settings that reach it (eval them)
#
# Everything lives under $AIRFLOW_HOME (default .cache/airflow, git-ignored). Knobs (environment):
#   AIRFLOW_HOME, AIRFLOW_PORT (8080), AIRFLOW_PG_PORT (54329), AIRFLOW_HEALTH_PORT (8974: the
#   scheduler's health check), AIRFLOW_STATSD_PORT (8125, UDP: Airflow's metrics) and
#   AIRFLOW_METRICS_PORT (9102: the same metrics for Prometheus), LAKEHOUSE_HOME,
#   LAKEHOUSE_SPARK_CONN: the spark_default connection as JSON, e.g.
#   '{"conn_type": "spark", "host": "spark://spark-master", "port": 7077}' for a cluster (without it:
#   the cluster LAKEHOUSE_SPARK_MASTER names, if it names one, else local[2]).
# Across hosts (docs/operations.md, "Deployment across hosts"): LAKEHOUSE_BIND_ADDRESS, which
#   `lakehouse hosts run` sets, is the address PostgreSQL and the api-server listen on and are
#   reached at (default 127.0.0.1); AIRFLOW_DATABASE_URL names a database elsewhere, as `metastore`
#   on the metastore host prints it, and then `start` starts no PostgreSQL of its own.
# Sign-in (the FAB auth manager; docs/airflow.md, "Who may do what"): AIRFLOW_LOGIN=database (default:
#   the users this script creates in Airflow's database) or directory (LDAP: AIRFLOW_LDAP_URI, and
#   AIRFLOW_LDAP_BASE_DN with people under ou=people and groups under ou=groups; without
#   AIRFLOW_LDAP_URI, this script serves a test directory with slapd on AIRFLOW_LDAP_PORT, 3389).
set -Eeuo pipefail
# Whatever fails, say which command it was: a silent exit 1 leaves a newcomer nowhere to look.
trap 'echo "scripts/airflow.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/.cache/airflow}"
PORT="${AIRFLOW_PORT:-8080}"
PG_PORT="${AIRFLOW_PG_PORT:-54329}"
HEALTH_PORT="${AIRFLOW_HEALTH_PORT:-8974}"
STATSD_PORT="${AIRFLOW_STATSD_PORT:-8125}"
METRICS_PORT="${AIRFLOW_METRICS_PORT:-9102}"
BIND="${LAKEHOUSE_BIND_ADDRESS:-127.0.0.1}"
DATABASE_URL="${AIRFLOW_DATABASE_URL:-}"
PG_DATA="$AIRFLOW_HOME/postgres"
RUN="$AIRFLOW_HOME/run"
LOGS="$AIRFLOW_HOME/process-logs"
SECRETS="$AIRFLOW_HOME/secrets.env"
# The platform's database users' passwords (lakehouse.ops.airflow_auth: admin, operator, viewer).
PASSWORDS="$AIRFLOW_HOME/passwords.json"
LOGIN="${AIRFLOW_LOGIN:-database}"
LDAP_PORT="${AIRFLOW_LDAP_PORT:-3389}"
LDAP_BASE_DN="${AIRFLOW_LDAP_BASE_DN:-dc=lakehouse,dc=test}"
LDAP_URI="${AIRFLOW_LDAP_URI:-}"
# The test directory slapd serves when no AIRFLOW_LDAP_URI is given, and its people's passwords.
DIRECTORY="$AIRFLOW_HOME/directory"
DIRECTORY_PASSWORDS="$AIRFLOW_HOME/directory_passwords.json"

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
# PostgreSQL refuses to run as root: as root, the cluster belongs to the postgres user; otherwise to you.
# runuser lives in /usr/sbin, which a plain user's PATH often lacks.
as_postgres() { if [ "$(id -u)" = 0 ]; then "$(command -v runuser || echo /usr/sbin/runuser)" -u postgres -- "$@"; else "$@"; fi; }
own_for_postgres() { if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$@"; fi; }

ensure_postgres_installed() {
    if [ -z "$(pg_bin)" ]; then
        echo "Installing PostgreSQL (Debian package) ..."
        bash "$ROOT/scripts/system-deps.sh"
    fi
}

generate_secrets() {
    # Generated once per AIRFLOW_HOME; never a default password.
    [ -f "$SECRETS" ] && return
    mkdir -p "$AIRFLOW_HOME"
    umask 077
    "$VENV/bin/python" - "$SECRETS" <<'PY'
import secrets, sys, base64
values = {
    "PG_PASSWORD": secrets.token_urlsafe(24),
    "JWT_SECRET": secrets.token_urlsafe(32),
    "API_SECRET_KEY": secrets.token_urlsafe(32),
    "FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    "LDAP_ADMIN_PASSWORD": secrets.token_urlsafe(24),
}
with open(sys.argv[1], "w") as handle:
    handle.writelines(f"{k}='{v}'\n" for k, v in values.items())
PY
}

# The metastore's own role and database in the same cluster; its password is added to the secrets of
# a home made before the metastore existed.
ensure_metastore_database() {
    if ! grep -q '^METASTORE_PASSWORD=' "$SECRETS"; then
        ( umask 077; echo "METASTORE_PASSWORD='$("$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')'" >> "$SECRETS" )
    fi
    # shellcheck disable=SC1090
    source "$SECRETS"
    local bin; bin="$(pg_bin)"
    local psql=(as_postgres "$bin/psql" -q -h "$PG_DATA" -p "$PG_PORT" -U postgres -d postgres -tA)
    if [ -z "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'metastore'")" ]; then
        "${psql[@]}" -c "CREATE USER metastore WITH PASSWORD '$METASTORE_PASSWORD'" \
            -c "CREATE DATABASE metastore OWNER metastore" >/dev/null
    fi
}

metastore() {
    [ -x "$VENV/bin/python" ] || { echo "run 'make setup' first" >&2; exit 1; }
    generate_secrets
    start_postgres
    ensure_metastore_database
    echo "export LAKEHOUSE_METASTORE_URL='jdbc:postgresql://$BIND:$PG_PORT/metastore?$PG_TLS_QUERY'"
    echo "export LAKEHOUSE_METASTORE_USER=metastore"
    echo "export LAKEHOUSE_METASTORE_PASSWORD='$METASTORE_PASSWORD'"
    # Airflow's database in the same cluster, for an Airflow on another host (start's AIRFLOW_DATABASE_URL).
    echo "export AIRFLOW_DATABASE_URL='$(local_database_url)'"
}

local_database_url() {
    # shellcheck disable=SC1090
    source "$SECRETS"
    echo "postgresql+psycopg2://airflow:$PG_PASSWORD@$BIND:$PG_PORT/airflow?$PG_TLS_QUERY"
}

# The spark_default connection: LAKEHOUSE_SPARK_CONN, else the cluster LAKEHOUSE_SPARK_MASTER names
# (spark://HOST:PORT, as `lakehouse hosts run` gives every host), else local[2].
spark_connection() {
    local master="${LAKEHOUSE_SPARK_MASTER:-}"
    if [ -n "${LAKEHOUSE_SPARK_CONN:-}" ]; then
        echo "$LAKEHOUSE_SPARK_CONN"
    elif [[ "$master" =~ ^(spark://[^:/]+):([0-9]+)$ ]]; then
        echo "{\"conn_type\": \"spark\", \"host\": \"${BASH_REMATCH[1]}\", \"port\": ${BASH_REMATCH[2]}}"
    else
        echo '{"conn_type": "spark", "host": "local[2]"}'
    fi
}

write_env() {
    # shellcheck disable=SC1090
    source "$SECRETS"
    SPARK_CONN="$(spark_connection)"
    cat > "$AIRFLOW_HOME/env.sh" <<EOF
export AIRFLOW_HOME='$AIRFLOW_HOME'
export PATH='$VENV/bin':"\$PATH"
export AIRFLOW__CORE__DAGS_FOLDER='$ROOT/dags'
# The DAGs and their tasks import this checkout's package, whichever checkout the venv was installed from.
export PYTHONPATH='$ROOT'"\${PYTHONPATH:+:\$PYTHONPATH}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# LocalExecutor, whose workers start with the DAG files parsed and, when a Spark service is named,
# the Spark Connect client imported: a backfill chunk's task 0.45 s instead of 0.85 s
# (lakehouse/ops/local_executor.py).
export AIRFLOW__CORE__EXECUTOR=lakehouse.ops.local_executor.LakehouseLocalExecutor
export AIRFLOW__CORE__PARALLELISM=4
export AIRFLOW__CORE__FERNET_KEY='$FERNET_KEY'
export AIRFLOW__CORE__AUTH_MANAGER=lakehouse.ops.airflow_auth_manager.ThrottledFabAuthManager
export AIRFLOW__FAB__CONFIG_FILE='$AIRFLOW_HOME/webserver_config.py'
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL='http://$BIND:$PORT/execution/'
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='${DATABASE_URL:-$(local_database_url)}'
export AIRFLOW__API__HOST=$BIND
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__API__BASE_URL='http://$BIND:$PORT'
export AIRFLOW__API__SECRET_KEY='$API_SECRET_KEY'
export AIRFLOW__API_AUTH__JWT_SECRET='$JWT_SECRET'
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=15
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30
export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=2
# An idle scheduler loop sleeps this long (Airflow's default: 1 s), and a backfill's next chunk waits
# for its next loop: 24 hourly chunks took 27 s with 1 s, 14 s with 0.2 s; the idle scheduler uses
# 1.4% of a core with 1 s, 5.7% with 0.2 s (docs/airflow.md, "How a backfill's chunks run").
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=0.2
export AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT=600
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=True
export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=127.0.0.1
export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT=$HEALTH_PORT
export AIRFLOW__METRICS__STATSD_ON=True
export AIRFLOW__METRICS__STATSD_HOST=127.0.0.1
export AIRFLOW__METRICS__STATSD_PORT=$STATSD_PORT
export AIRFLOW__METRICS__STATSD_PREFIX=airflow
export AIRFLOW__LOGGING__BASE_LOG_FOLDER='$AIRFLOW_HOME/logs'
export AIRFLOW_CONN_SPARK_DEFAULT='$SPARK_CONN'
EOF
    # The lakehouse settings (LAKEHOUSE_*) of this shell reach every task. A shell with none set is
    # the usual case (the defaults apply), so an empty match is not a failure.
    local name
    for name in $(compgen -e | grep '^LAKEHOUSE_' | grep -v '^LAKEHOUSE_SPARK_CONN$' || true); do
        printf "export %s=%q\n" "$name" "${!name}"
    done >> "$AIRFLOW_HOME/env.sh"
}

# This checkout's lakehouse.ops.airflow_auth (users, passwords, FAB's webserver_config.py, the test directory).
auth() { PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m lakehouse.ops.airflow_auth "$@"; }

# The test directory: Debian's slapd on loopback, as the openldap user when run as root (as
# PostgreSQL runs as postgres), its people and groups loaded once when its database is new. Prints
# the people's passwords it generated.
start_directory() {
    [ -x /usr/sbin/slapd ] || bash "$ROOT/scripts/system-deps.sh" >&2
    # A home made before the directory existed lacks its administrator's password: add it.
    if ! grep -q '^LDAP_ADMIN_PASSWORD=' "$SECRETS"; then
        ( umask 077; echo "LDAP_ADMIN_PASSWORD='$("$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')'" >> "$SECRETS" )
    fi
    # shellcheck disable=SC1090
    source "$SECRETS"
    mkdir -p "$DIRECTORY"
    local secret="$DIRECTORY/admin.secret" fresh=0
    ( umask 077; printf '%s' "$LDAP_ADMIN_PASSWORD" > "$secret" )
    [ -f "$DIRECTORY/db/data.mdb" ] || fresh=1
    auth directory "$DIRECTORY" "$LDAP_BASE_DN" "$DIRECTORY_PASSWORDS" "$secret"
    local as_user=()
    if [ "$(id -u)" = 0 ]; then chown -R openldap:openldap "$DIRECTORY"; as_user=(-u openldap -g openldap); fi
    if ! { [ -f "$DIRECTORY/slapd.pid" ] && kill -0 "$(cat "$DIRECTORY/slapd.pid")" 2>/dev/null; }; then
        /usr/sbin/slapd "${as_user[@]}" -f "$DIRECTORY/slapd.conf" -h "ldap://127.0.0.1:$LDAP_PORT/"
    fi
    if [ "$fresh" = 1 ]; then
        ldapadd -x -H "ldap://127.0.0.1:$LDAP_PORT" -D "cn=admin,$LDAP_BASE_DN" -y "$secret" \
            -f "$DIRECTORY/directory.ldif" > "$LOGS/directory-load.log"
    fi
}

stop_directory() {
    local pidfile="$DIRECTORY/slapd.pid" pid
    [ -f "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
}

# PostgreSQL takes TCP connections over TLS only (pg_hba's hostssl): the passwords and the rows of
# Airflow's database and the metastore never cross a network in clear. A certificate authority made
# once per AIRFLOW_HOME (lakehouse.services.certificates, as Kafka's) signs the server's key and
# certificate for the address it listens on (BIND) and that address's names; clients check the
# server against it (sslmode=verify-full with TLS_CA as the root). The authority's key stays in tls/
# (mode 700); the server's PEM is in the cluster folder, readable by postgres only.
TLS="$AIRFLOW_HOME/tls"
TLS_CA="$TLS/ca.crt"
ensure_postgres_certificate() {
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m lakehouse.services.certificates \
        "$TLS" "$PG_DATA/server.pem" "$BIND"
    own_for_postgres "$PG_DATA/server.pem"
}

# Client URLs' TLS settings: the server must hold a certificate TLS_CA signed, for the host dialled.
PG_TLS_QUERY="sslmode=verify-full&sslrootcert=$TLS_CA"

start_postgres() {
    ensure_postgres_installed
    local bin; bin="$(pg_bin)"
    mkdir -p "$PG_DATA"
    own_for_postgres "$PG_DATA"
    chmod 700 "$PG_DATA"
    if [ ! -f "$PG_DATA/PG_VERSION" ]; then
        source "$SECRETS"
        local pwfile="$PG_DATA/../.pg-superuser"
        head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$pwfile"
        own_for_postgres "$pwfile"
        as_postgres "$bin/initdb" -D "$PG_DATA" -U postgres --auth=scram-sha-256 --pwfile="$pwfile" >/dev/null
        rm -f "$pwfile"
        NEW_CLUSTER=1
    fi
    # Rewritten at each start: a cluster made before TLS takes TCP connections over TLS from now on.
    # From this host alone on one machine; across hosts, from the hosts' subnet (samenet).
    local peers="127.0.0.1/32"
    [ "$BIND" = 127.0.0.1 ] || peers=samenet
    echo "hostssl all all $peers scram-sha-256" > "$PG_DATA/pg_hba.conf"
    # The socket lives in the cluster folder (mode 700): only its owner can reach it.
    echo "local all all trust" >> "$PG_DATA/pg_hba.conf"
    ensure_postgres_certificate
    local options="-p $PG_PORT -k $PG_DATA -c listen_addresses=$BIND -c ssl=on"
    options+=" -c ssl_cert_file=$PG_DATA/server.pem -c ssl_key_file=$PG_DATA/server.pem"
    if as_postgres "$bin/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1 \
        && [ "$(as_postgres "$bin/psql" -h "$PG_DATA" -p "$PG_PORT" -U postgres -d postgres -tAc 'SHOW ssl')" != on ]; then
        as_postgres "$bin/pg_ctl" -D "$PG_DATA" -w -m fast stop >/dev/null  # started before TLS: again with it
    fi
    if ! as_postgres "$bin/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
        as_postgres "$bin/pg_ctl" -D "$PG_DATA" -w -l "$PG_DATA/server.log" -o "$options" start >/dev/null
    fi
    if [ "${NEW_CLUSTER:-0}" = 1 ]; then
        source "$SECRETS"
        as_postgres "$bin/psql" -q -h "$PG_DATA" -p "$PG_PORT" -U postgres -d postgres \
            -c "CREATE USER airflow WITH PASSWORD '$PG_PASSWORD'" -c "CREATE DATABASE airflow OWNER airflow" >/dev/null
    fi
}

# Airflow's scheduler and dag-processor exit when their database goes away: a PostgreSQL restart with
# 20 s of downtime ended both (the api-server stays up; its requests fail meanwhile). Nothing would
# run again until someone noticed, so each process runs under scripts/supervise.sh, which starts it
# again after it exits, backing off while it keeps failing at once. When the database goes away
# while a task runs, the scheduler can also hang instead of exiting (apache/airflow#67870): its own
# health check (the job's heartbeat, served on AIRFLOW_HEALTH_PORT) is its liveness probe, and the
# supervisor restarts a scheduler that fails it for a minute.
EXITED="exited with code"  # as scripts/supervise.sh logs a process's end

start_process() {
    local name="$1"; shift
    if [ -f "$RUN/$name.pid" ] && kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null; then
        return
    fi
    # Each in its own session, so stop can end it with its children (task processes, spark-submit)
    # and the loop around it.
    setsid bash "$ROOT/scripts/supervise.sh" "$VENV/bin/airflow" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$RUN/$name.pid"
}

# Airflow's metrics go out as StatsD datagrams; this exporter (lakehouse.ops.statsd_exporter) serves
# them to Prometheus and names its address under the lakehouse home's metrics/ folder.
start_statsd_exporter() {
    if [ -f "$RUN/statsd-exporter.pid" ] && kill -0 "$(cat "$RUN/statsd-exporter.pid")" 2>/dev/null; then
        return
    fi
    # This checkout's code, whatever the working directory; in a session of its own, as start_process's.
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" setsid "$VENV/bin/python" -m lakehouse.ops.statsd_exporter \
        --udp-port "$STATSD_PORT" --http-port "$METRICS_PORT" > "$LOGS/statsd-exporter.log" 2>&1 < /dev/null &
    echo $! > "$RUN/statsd-exporter.pid"
}

# The scheduler and the triggerer serve no task logs (--skip-serve-logs): both run on this host, where
# the api-server reads their log files, and Airflow's log server would listen on every address.
start_scheduler() {
    SUPERVISE_LIVENESS="curl -fsS --max-time 10 http://127.0.0.1:$HEALTH_PORT/health" \
        start_process scheduler scheduler --skip-serve-logs
}

wait_for_api() {
    for _ in $(seq 1 180); do
        if curl -fsS --max-time 5 "http://$BIND:$PORT/api/v2/monitor/health" >/dev/null 2>&1; then
            return 0
        fi
        # An api-server that cannot start (a port taken, say) would only be started again and again.
        if grep -q "$EXITED" "$LOGS/api-server.log"; then
            tail -n 40 "$LOGS/api-server.log"; echo "api-server exited" >&2; return 1
        fi
        sleep 1
    done
    echo "api-server did not answer on port $PORT" >&2; return 1
}

start() {
    [ -x "$VENV/bin/airflow" ] || { echo "run 'make setup' first" >&2; exit 1; }
    # A misspelt AIRFLOW_LOGIN stops here, before anything starts.
    auth check-login "$LOGIN"
    mkdir -p "$RUN" "$LOGS"
    generate_secrets
    write_env
    [ -n "$DATABASE_URL" ] || start_postgres
    # shellcheck disable=SC1091
    source "$AIRFLOW_HOME/env.sh"
    # The platform's users' passwords: generated once, kept in a file of mode 600, printed once.
    local generated
    generated="$(auth passwords "$PASSWORDS" admin operator viewer)"
    if [ "$LOGIN" = directory ] && [ -z "$LDAP_URI" ]; then
        generated+=$'\n'"$(start_directory)"
        LDAP_URI="ldap://127.0.0.1:$LDAP_PORT"
    fi
    auth webserver-config "$AIRFLOW_HOME/webserver_config.py" "$LOGIN" "$LDAP_URI" "$LDAP_BASE_DN"
    airflow db migrate > "$LOGS/db-migrate.log" 2>&1 || { tail -n 40 "$LOGS/db-migrate.log"; exit 1; }
    # FAB's users and roles live in Airflow's database: create the platform's, idempotently.
    auth users "$PASSWORDS" > "$LOGS/users.log" 2>&1 || { tail -n 40 "$LOGS/users.log"; exit 1; }
    airflow pools set lakehouse_backfill 1 "Backfill chunks run one at a time, leaving slots for the stream's DAGs" >/dev/null
    start_statsd_exporter
    start_process api-server api-server --port "$PORT"
    start_scheduler
    start_process dag-processor dag-processor
    # Deferred tasks (a team's deferrable sensor, say) wait on the triggerer: without one they never resume.
    start_process triggerer triggerer --skip-serve-logs
    wait_for_api || { stop >/dev/null; exit 1; }
    if ! kill -0 "$(cat "$RUN/statsd-exporter.pid")" 2>/dev/null; then
        tail -n 20 "$LOGS/statsd-exporter.log"; echo "the StatsD exporter exited" >&2; stop >/dev/null; exit 1
    fi
    echo "Airflow is up: http://$BIND:$PORT  (sign-in: $LOGIN${LDAP_URI:+ at $LDAP_URI}; users admin, operator, viewer; logs in $LOGS)"
    grep -v '^$' <<< "$generated" || true  # nothing generated: nothing to show
}

# Ends a process's whole session (it was started with setsid; the supervised process has a process
# group of its own in it): TERM, up to 30 s for every member to exit, then KILL, and wait until none
# is left, so that no child still holds a port on return.
stop_session() {
    local pid="$1"
    pkill -TERM -s "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 30); do pgrep -s "$pid" >/dev/null || return 0; sleep 1; done
    pkill -KILL -s "$pid" 2>/dev/null || true
    for _ in $(seq 1 10); do pgrep -s "$pid" >/dev/null || return 0; sleep 1; done
    echo "processes of session $pid did not exit" >&2
}

# The processes start() runs, each in a session of its own noted in $RUN/<name>.pid.
PROCESSES="scheduler dag-processor triggerer api-server statsd-exporter"

stop() {
    for name in $PROCESSES; do
        local pidfile="$RUN/$name.pid"
        if [ -f "$pidfile" ]; then
            stop_session "$(cat "$pidfile")"
            rm -f "$pidfile"
        fi
    done
    stop_directory
    local bin; bin="$(pg_bin)"
    if [ -n "$bin" ] && [ -f "$PG_DATA/PG_VERSION" ]; then
        as_postgres "$bin/pg_ctl" -D "$PG_DATA" -m fast stop >/dev/null 2>&1 || true
    fi
    echo "Airflow and its PostgreSQL stopped"
}

# pause stops every Airflow process in place (SIGSTOP to each whole session, the supervisor and its
# liveness probe among them) and resume continues them: a benchmark times another job meanwhile on a
# machine without the deployment's polls (the idle scheduler's loop alone is 5.7% of a core).
# PostgreSQL and the directory keep running; they sleep when nobody asks them anything.
signal_sessions() {
    local signal="$1"
    for name in $PROCESSES; do
        if [ -f "$RUN/$name.pid" ]; then
            pkill "-$signal" -s "$(cat "$RUN/$name.pid")" 2>/dev/null || true  # a session already ended
        fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    pause) signal_sessions STOP ;;
    resume) signal_sessions CONT ;;
    env) generate_secrets; write_env; cat "$AIRFLOW_HOME/env.sh" ;;
    metastore) metastore ;;
    *) echo "usage: $0 start|stop|pause|resume|env|metastore" >&2; exit 2 ;;
esac
