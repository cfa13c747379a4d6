"""The README's "Running a broker" block, run as written: ``mpbroker serve`` with its
overrides (log.dir under a scratch HOME, port 9092 as written), then every
``mpbroker-ctl`` line of the block in order, each of which must succeed (the last one
stops the broker). The broker runs in a network namespace of its own, and so does each
ctl line: the namespace's /proc/net/unix holds this broker's control socket only, so
``mpbroker-ctl status`` without options finds exactly it, and port 9092 is free there
whatever else runs on the machine."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mpbroker.control_client import NotRunning, call
from tests.readme.readme_blocks import REPO, block, commands

BIN = os.path.dirname(sys.executable)


def as_run_here(command: str, home) -> list:
    """A README command line with the venv's bin directory and $HOME the scratch home."""
    return shlex.split(command.replace("$HOME", str(home)).replace(".venv/bin/", f"{BIN}/"), comments=True)


@pytest.fixture
def own_network_namespace():
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs root, unshare and nsenter for a network namespace")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {probe.stderr.strip()}")


def test_every_ctl_line_works_right_after_the_serve_line(own_network_namespace, tmp_path):
    lines = commands(block("running-a-broker"))
    serve, ctl_lines = lines[0], lines[1:]
    assert " serve " in serve and "--override log.dir=$HOME/mpbroker-data" in serve
    assert ctl_lines and all(line.startswith(".venv/bin/mpbroker-ctl ") for line in ctl_lines)
    log_dir = str(tmp_path / "mpbroker-data")
    output_path = tmp_path / "broker.log"
    with open(output_path, "w") as output:
        broker = subprocess.Popen(["unshare", "-n", *as_run_here(serve, tmp_path)], cwd=REPO,
                                  stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:  # the socket file is reachable from outside the namespace
            assert broker.poll() is None, output_path.read_text()
            try:
                if call(os.path.join(log_dir, "mpbroker.sock"), "status", timeout=2)["acceptor"]["state"] == "up":
                    break
            except (NotRunning, OSError, ValueError):
                pass
            assert time.monotonic() < deadline, output_path.read_text()
            time.sleep(0.05)
        for line in ctl_lines:
            result = subprocess.run(["nsenter", f"--net=/proc/{broker.pid}/ns/net", *as_run_here(line, tmp_path)],
                                    cwd=REPO, capture_output=True, text=True, timeout=240)
            assert result.returncode == 0, (line, result.stdout, result.stderr)
            if "--json" in line:
                status = json.loads(result.stdout)
                assert (status["pid"], status["log_dir"], status["port"]) == (broker.pid, log_dir, 9092)
            elif " status" in line:
                assert f"log.dir {log_dir}" in result.stdout, (line, result.stdout)
        assert "shutdown" in ctl_lines[-1]
        assert broker.wait(30) == 0
    finally:
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGKILL)
            broker.wait(10)
