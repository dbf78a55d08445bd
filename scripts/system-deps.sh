#!/usr/bin/env bash
# Debian packages the tests need: PostgreSQL (Airflow's metadata database; SQLite cannot run Airflow 3
# backfills), Chromium (the browser the UI tests drive), Prometheus (with promtool: the metrics
# tests and `lakehouse prometheus start`) and Alertmanager (with amtool: `lakehouse alertmanager
# start`, where Prometheus sends what fires), OpenLDAP's slapd and client tools (the test directory
# Airflow's directory login runs against: scripts/airflow.sh). Installed only when absent.
#   scripts/system-deps.sh          # all of the above
#   scripts/system-deps.sh build    # only what building the Python packages needs: python-ldap has no
#                                   # wheel on PyPI and compiles against libldap and libsasl's headers
set -Eeuo pipefail
trap 'echo "scripts/system-deps.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
# `make test` runs the build's and the tests' installs at once (setup and system-deps in parallel):
# one at a time, as apt-get fails at once on a lock another holds. Each then looks at what is missing.
exec 9> "${TMPDIR:-/tmp}/lakehouse-system-deps.lock"
flock 9
missing=()
[ -f /usr/include/ldap.h ] || missing+=(libldap2-dev)
[ -f /usr/include/sasl/sasl.h ] || missing+=(libsasl2-dev)
if [ "${1:-}" = build ]; then
    if [ ${#missing[@]} -gt 0 ]; then
        echo "Installing ${missing[*]} (Debian packages) ..."
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    exit 0
fi
ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v amtool >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
[ -x /usr/sbin/slapd ] || missing+=(slapd)
command -v ldapadd >/dev/null 2>&1 || missing+=(ldap-utils)
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
