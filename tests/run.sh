#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs it.
# Usage: bash tests/run.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

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
