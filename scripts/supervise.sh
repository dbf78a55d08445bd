#!/usr/bin/env bash
# Runs a command again each time it exits, as a service manager's Restart=always would, and backs
# off while it keeps failing at once: the first restart after SUPERVISE_DELAY_S seconds, each next
# one after twice as long, up to SUPERVISE_MAX_DELAY_S. A run that lasted SUPERVISE_STEADY_S or
# more resets the delay: what ended it has passed (a database that was restarted, say), while a
# process that cannot start (a port taken, a bad setting) would otherwise fill its log.
#
# usage: scripts/supervise.sh COMMAND [ARGUMENT...]
set -u
delay="${SUPERVISE_DELAY_S:-5}"
max_delay="${SUPERVISE_MAX_DELAY_S:-60}"
steady="${SUPERVISE_STEADY_S:-60}"
first_delay="$delay"
while true; do
    started=$SECONDS
    "$@"
    code=$?
    if [ $((SECONDS - started)) -ge "$steady" ]; then
        delay="$first_delay"
    fi
    echo "scripts/supervise.sh: $* exited with code $code; starting it again in $delay s"
    sleep "$delay"
    delay=$((delay * 2 > max_delay ? max_delay : delay * 2))
done
