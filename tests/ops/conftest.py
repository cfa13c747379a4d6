"""The systemd units of ops/, as the tests verify them: ExecStart pointed at this venv."""

import os
import shutil
import sys

import pytest

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "ops", "mpbroker.service")
INSTALLED_MPBROKER = "/opt/mpbroker/venv/bin/mpbroker"


def read_unit() -> str:
    with open(UNIT) as f:
        return f.read()


@pytest.fixture
def local_unit() -> str:
    """ops/mpbroker.service with ExecStart at this venv's ``mpbroker``."""
    mpbroker = os.path.join(os.path.dirname(sys.executable), "mpbroker")
    assert os.access(mpbroker, os.X_OK), f"{mpbroker} is missing: pip install -e ."
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing (tests/run.sh installs systemd)"
    text = read_unit()
    assert INSTALLED_MPBROKER in text
    return text.replace(INSTALLED_MPBROKER, mpbroker)
