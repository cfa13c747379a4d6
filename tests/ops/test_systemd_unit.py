"""ops/mpbroker.service passes ``systemd-analyze verify`` and says what the supervisor does:
notify, HUP reload, a mixed kill. verify checks that ExecStart exists, and in a checkout
/opt/mpbroker/venv does not: the copy verified here has ExecStart pointed at this venv's
``mpbroker`` (tests/ops/test_install_steps.py verifies the installed unit instead)."""

import configparser
import os
import subprocess
import sys

from tests.ops.conftest import read_unit


def verify(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "mpbroker.service"
    path.write_text(text)
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)


def test_the_unit_passes_systemd_analyze_verify(local_unit, tmp_path):
    result = verify(local_unit, tmp_path)
    assert result.returncode == 0 and "mpbroker.service" not in result.stdout + result.stderr, \
        result.stdout + result.stderr


def test_verify_catches_a_broken_unit(local_unit, tmp_path):
    """The check above can fail: a bad value and a missing binary are reported."""
    bad_value = verify(local_unit.replace("NotifyAccess=main", "NotifyAccess=sometimes"), tmp_path)
    assert "mpbroker.service:" in bad_value.stdout + bad_value.stderr  # "...: Failed to parse notify access"
    missing = verify(local_unit.replace(os.path.dirname(sys.executable), "/nonexistent"), tmp_path)
    assert missing.returncode != 0


def test_the_unit_matches_what_the_supervisor_does():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(read_unit())
    service = parser["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"  # READY/STOPPING from the supervisor
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillMode"] == "mixed"  # TERM to the supervisor only; it stops the children in order
    assert int(service["TimeoutStopSec"]) >= 120  # the workers' graceful-stop limit (STOP_TIMEOUT_S["worker"] in mpbroker/supervision/children.py)
    assert service["ExecStart"] == "/opt/mpbroker/venv/bin/mpbroker serve /etc/mpbroker/server.properties"
    # No --override: log.dir comes from the file (the install writes /var/lib/mpbroker there), so an
    # operator's own log.dir is the one used and mpbroker-ctl -c finds the same control socket.
    assert "--override" not in service["ExecStart"] and service["StateDirectory"] == "mpbroker"
    assert service["ReadWritePaths"] == "/var/lib/mpbroker" and service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes" and int(service["LimitNOFILE"]) >= 65536
    assert parser["Install"]["WantedBy"] == "multi-user.target"
