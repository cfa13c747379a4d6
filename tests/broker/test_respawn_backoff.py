"""The respawn back-off is visible: a child that dies young waits a growing back-off before
it is forked again, and the log line of its death, ``mpbroker-ctl status --json``
(``respawn_in_s``) and the status table say how long."""

import json
import os
import re
import signal

from mpbroker.cli import ctl


def kill_worker(broker, slot: int) -> int:
    victim = broker.worker_pid(slot)
    os.kill(victim, signal.SIGKILL)
    return victim


def respawned(broker, slot: int, victim: int) -> dict:
    return broker.wait_until(lambda s: s["workers"][slot]["pid"] not in (None, victim)
                             and s["workers"][slot]["state"] == "up", timeout=15, what=f"worker {slot} respawned")


def ctl_status(broker, capsys, *args) -> str:
    capsys.readouterr()
    assert ctl.main(["-c", broker.config_path, "status", *args]) == 0
    return capsys.readouterr().out


def test_a_young_workers_back_off_is_logged_and_shown_in_status(broker, capsys):
    status = broker.status()
    assert all(process["respawn_in_s"] is None for process in status["workers"] + [status["acceptor"]])
    for _ in range(2):  # each dies young: back-offs 0.5 s, 1 s
        respawned(broker, 0, kill_worker(broker, 0))
    victim = kill_worker(broker, 0)  # the third: 2 s
    broker.wait_until(lambda s: s["workers"][0]["state"] == "down", timeout=5, what="worker 0's death noticed")

    worker = json.loads(ctl_status(broker, capsys, "--json"))["workers"][0]
    assert worker["pid"] is None and worker["state"] == "down"
    assert 0 < worker["respawn_in_s"] <= 2.0, worker
    table = ctl_status(broker, capsys)
    row = next(line for line in table.splitlines() if line.startswith("worker 0"))
    assert re.search(r"down, respawn in [012]\.\ds", row), table
    assert "respawn in" not in next(line for line in table.splitlines() if line.startswith("worker 1"))

    status = respawned(broker, 0, victim)
    assert status["workers"][0]["respawn_in_s"] is None and status["workers"][0]["restarts"] == 3
    output = broker.output()
    for back_off in ("0.5", "1.0", "2.0"):
        assert re.search(rf"worker 0 \(pid gone\) died: signal SIGKILL after \d+\.\ds; respawning in {back_off} s",
                         output), output


def test_a_worker_that_lived_long_enough_is_respawned_at_once(broker, capsys):
    broker.wait_until(lambda s: s["workers"][1]["uptime_s"] > 5.5, timeout=10, what="worker 1 older than 5 s")
    victim = kill_worker(broker, 1)
    respawned(broker, 1, victim)
    assert re.search(r"worker 1 \(pid gone\) died: signal SIGKILL after \d+\.\ds; respawning now", broker.output())
    assert "respawn in" not in ctl_status(broker, capsys)
