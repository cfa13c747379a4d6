#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs it.
# Usage: bash tests/run.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

# A real ZooKeeper for the registry and consumer-group tests (Debian's package; Java is present).
if [ ! -e /usr/share/java/zookeeper.jar ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends zookeeper >/dev/null
fi

# systemd-analyze checks ops/mpbroker.service.
if ! command -v systemd-analyze >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi

VENV=${MPBROKER_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -e '.[test]'

set +e
"$VENV/bin/python" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "tests/run.sh: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$status"
