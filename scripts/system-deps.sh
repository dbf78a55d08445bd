#!/usr/bin/env bash
# Debian packages the tests need: PostgreSQL (Airflow's metadata database; SQLite cannot run Airflow 3
# backfills), Chromium (the browser the UI tests drive), Prometheus (with promtool: the metrics
# tests and `lakehouse prometheus start`) and Alertmanager (with amtool: `lakehouse alertmanager
# start`, where Prometheus sends what fires). Installed only when absent.
set -Eeuo pipefail
trap 'echo "scripts/system-deps.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
missing=()
ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v amtool >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
if [ ${#missing[@]} -gt 0 ]; then
    echo "Installing ${missing[*]} (Debian packages) ..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v promtool >/dev/null 2>&1; then
    echo "Installing prometheus (Debian package) ..."
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    # Without recommends: they add a node exporter, which nothing here uses.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
