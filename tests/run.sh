#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs it.
# Usage: bash tests/run.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests need, installed when missing (one apt-get run for all):
# a real ZooKeeper for the registry and consumer-group tests (Java is present),
# libfaketime to step the broker's date (tests/faults/test_clock_steps.py),
# systemd-analyze to check ops/mpbroker.service, iproute2 (ip netns, veth, bridges,
# blackhole routes) for the network faults (tests/faults/netcluster/), kcat (librdkafka's
# command-line client) against the modern Kafka listener (tests/kafka/, the README walk).
MISSING=""
[ -e /usr/share/java/zookeeper.jar ] || MISSING="$MISSING zookeeper"
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || MISSING="$MISSING libfaketime"
command -v systemd-analyze >/dev/null 2>&1 || MISSING="$MISSING systemd"
command -v ip >/dev/null 2>&1 || MISSING="$MISSING iproute2"
command -v kcat >/dev/null 2>&1 || MISSING="$MISSING kcat"
if [ -n "$MISSING" ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
fi

# kafkajs for tests/kafka/test_kafkajs.py (Node is present), in a cache outside the repository.
NODE_CACHE="$HOME/.cache/mpbroker-test-node"
if [ ! -e "$NODE_CACHE/node_modules/kafkajs/package.json" ]; then
    npm install --prefix "$NODE_CACHE" --no-audit --no-fund --silent kafkajs@2.2.4 >/dev/null
fi
export MPBROKER_NODE_MODULES="$NODE_CACHE/node_modules"

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
