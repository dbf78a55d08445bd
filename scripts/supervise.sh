#!/usr/bin/env bash
# Runs a command again each time it exits, as a service manager's Restart=always would, and backs
# off while it keeps failing at once: the first restart after SUPERVISE_DELAY_S seconds, each next
# one after twice as long, up to SUPERVISE_MAX_DELAY_S. A run that lasted SUPERVISE_STEADY_S or
# more resets the delay: what ended it has passed (a database that was restarted, say), while a
# process that cannot start (a port taken, a bad setting) would otherwise fill its log.
#
# A process can also hang instead of exiting: Airflow 3.3's scheduler, after its database went away
# mid-task, waits forever for an idle executor worker (apache/airflow#67870), and a restart policy
# alone never fires. With SUPERVISE_LIVENESS set (a shell command that succeeds while the process is
# healthy, as a Kubernetes liveness probe), the command runs every SUPERVISE_LIVENESS_EVERY_S
# seconds once SUPERVISE_LIVENESS_GRACE_S have passed since the start; after
# SUPERVISE_LIVENESS_FAILURES failures in a row the process and its children are stopped (TERM,
# KILL after 20 s) and started again like any process that exited.
#
# usage: scripts/supervise.sh COMMAND [ARGUMENT...]
set -u
delay="${SUPERVISE_DELAY_S:-5}"
max_delay="${SUPERVISE_MAX_DELAY_S:-60}"
steady="${SUPERVISE_STEADY_S:-60}"
liveness="${SUPERVISE_LIVENESS:-}"
every="${SUPERVISE_LIVENESS_EVERY_S:-15}"
grace="${SUPERVISE_LIVENESS_GRACE_S:-120}"
failures_allowed="${SUPERVISE_LIVENESS_FAILURES:-4}"
first_delay="$delay"
child=""

# The child runs in a process group of its own (job control), so that stopping it reaches the
# processes it started (task runners, log servers) and not this loop.
stop_child() {
    [ -n "$child" ] || return 0
    kill -TERM -- "-$child" 2>/dev/null || return 0
    for _ in $(seq 1 20); do kill -0 -- "-$child" 2>/dev/null || return 0; sleep 1; done
    kill -KILL -- "-$child" 2>/dev/null || true
}
trap 'stop_child; exit 143' TERM INT
set -m

# Returns when the child has exited, or once its liveness check failed too often (it is stopped).
# usage: watch_child STARTED COMMAND [ARGUMENT...]
watch_child() {
    local started=$1 failures=0
    shift
    while kill -0 "$child" 2>/dev/null; do
        sleep "$every" & wait $!  # in the background, so that a TERM is handled at once
        [ -n "$liveness" ] && [ $((SECONDS - started)) -ge "$grace" ] && kill -0 "$child" 2>/dev/null || continue
        if bash -c "$liveness" >/dev/null 2>&1; then
            failures=0
        else
            failures=$((failures + 1))
        fi
        if [ "$failures" -ge "$failures_allowed" ]; then
            echo "scripts/supervise.sh: $* failed its liveness check $failures times in a row; stopping it"
            stop_child
            return
        fi
    done
}

while true; do
    started=$SECONDS
    "$@" &
    child=$!
    if [ -n "$liveness" ]; then
        watch_child "$started" "$@"
    fi
    wait "$child"
    code=$?
    child=""
    if [ $((SECONDS - started)) -ge "$steady" ]; then
        delay="$first_delay"
    fi
    echo "scripts/supervise.sh: $* exited with code $code; starting it again in $delay s"
    sleep "$delay"
    delay=$((delay * 2 > max_delay ? max_delay : delay * 2))
done
