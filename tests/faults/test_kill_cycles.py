"""Random kill-and-restart cycles under steady acknowledged load.

Each cycle SIGKILLs one of: a worker, the acceptor (the supervisor respawns them), the
supervisor alone (its children die with it: PR_SET_PDEATHSIG) or the whole process tree
(both restarted here, as systemd's Restart= would). Load threads keep producing with
PRODUCE_ACKED throughout, half of them asking for durability "flush", half for
"append", retrying across the outages.

Guarantee checked: every message acknowledged, with either durability, is in the log
afterwards (a process death never loses the page cache; only a machine's power loss
can lose "append"-acknowledged data), every byte of every log is a valid message, and
the broker came back each time without manual repair.

    MPBROKER_KILL_CYCLES=100 MPBROKER_KILL_SEED=7 pytest -s tests/faults/test_kill_cycles.py

prints the table of the README's fault report (cycles per victim, recovery times).
"""

import os
import random
import signal
import statistics
import time

import pytest

from tests.broker.harness import BrokerProcess, wait_dead
from tests.broker.load import AckedLoad, read_everything
from tests.broker.test_faults import all_flushed, assert_logs_valid

CYCLES = int(os.environ.get("MPBROKER_KILL_CYCLES", "20"))  # 100 for the README's report
SEED = int(os.environ.get("MPBROKER_KILL_SEED", str(random.randrange(1 << 30))))
PARTITIONS = 4
VICTIMS = ("worker", "acceptor", "supervisor", "tree")
RESPAWN_BACKOFF_FREE_S = 5.0  # a child killed younger than this is respawned after a growing back-off


def all_up(status) -> bool:
    return status["acceptor"]["state"] == "up" and all(w["state"] == "up" for w in status["workers"])


def choose_victim(rng, broker) -> tuple:
    """``(kind, slot, status)``, each kind equally likely. A worker or the acceptor is
    killed once it lived long enough that its respawn is immediate (the load goes on
    meanwhile), so that the cycles measure recovery, not the respawn back-off."""
    kind = rng.choice(VICTIMS)
    slot = rng.randrange(len(broker.status()["workers"])) if kind == "worker" else None

    def old_enough(status) -> bool:
        child = status["workers"][slot] if kind == "worker" else status["acceptor"]
        return kind in ("supervisor", "tree") or (child["state"] == "up"
                                                   and child["uptime_s"] >= RESPAWN_BACKOFF_FREE_S)
    return kind, slot, broker.wait_until(old_enough, timeout=20, what=f"the {kind} to be old enough")


def kill(broker, kind: str, slot, status) -> None:
    if kind == "worker":
        os.kill(status["workers"][slot]["pid"], signal.SIGKILL)
        broker.wait_until(lambda s: s["workers"][slot]["pid"] not in (None, status["workers"][slot]["pid"])
                          and s["workers"][slot]["state"] == "up", timeout=20, what=f"worker {slot} respawned")
    elif kind == "acceptor":
        os.kill(status["acceptor"]["pid"], signal.SIGKILL)
        broker.wait_until(lambda s: s["acceptor"]["pid"] not in (None, status["acceptor"]["pid"])
                          and s["acceptor"]["state"] == "up", timeout=20, what="acceptor respawned")
    else:
        children = [w["pid"] for w in status["workers"]] + [status["acceptor"]["pid"]]
        if kind == "supervisor":
            broker.process.kill()
            broker.process.wait(10)
        else:
            broker.kill_tree()
        wait_dead([pid for pid in children if pid])  # as systemd's KillMode would make sure
        broker.start()


@pytest.mark.timeout(1200)
def test_random_kills_under_acked_load_lose_nothing(tmp_path, capsys):
    with capsys.disabled():  # before anything runs, so that a hang or a crash can be replayed
        print(f"\nkill cycles: {CYCLES} with MPBROKER_KILL_SEED={SEED}", flush=True)
    rng = random.Random(SEED)
    broker = BrokerProcess(tmp_path / "b", num_partitions=PARTITIONS)
    try:
        broker.start()
        load, recovery = run_cycles(broker, rng)
        broker.wait_until(all_flushed, what="every appended byte flushed")
        stored = read_everything(broker.port, "cycles", PARTITIONS)
        assert broker.stop() == 0
    finally:
        broker.close()
    assert_logs_valid(broker.log_dir)
    stored_set = set(stored)
    lost_flush = load.acked_by_durability[1] - stored_set
    lost_append = load.acked_by_durability[0] - stored_set
    rows = [f"| {kind} | {len(times)} | {statistics.median(times):.2f} s | {max(times):.2f} s |"
            for kind, times in recovery.items() if times]
    print(f"\nseed {SEED}: {CYCLES} cycles, {len(load.acked)} messages acknowledged "
          f"({len(load.acked_by_durability[1])} flush, {len(load.acked_by_durability[0])} append), "
          f"{load.retries} retries, {len(stored) - len(stored_set)} duplicates stored (resent after a lost ack), "
          f"lost: {len(lost_flush)} flush / {len(lost_append)} append")
    print("| victim (SIGKILL) | cycles | median recovery | max recovery |\n|---|---|---|---|\n" + "\n".join(rows))
    assert not lost_flush, f"seed {SEED}: {len(lost_flush)} flush-acknowledged messages lost"
    assert not lost_append, f"seed {SEED}: {len(lost_append)} append-acknowledged messages lost"
    assert sum(len(times) for times in recovery.values()) == CYCLES


def run_cycles(broker, rng) -> tuple:
    """Kill CYCLES times under load; the load stopped and joined; ``(load, recovery times)``."""
    load = AckedLoad(lambda: broker.port, "cycles", PARTITIONS, threads=4, requests=None, batch=5,
                     durability_of=lambda number: number % 2, retry_for_s=90).start()
    recovery = {kind: [] for kind in VICTIMS}
    try:
        for _ in range(CYCLES):
            load.wait_for_acks(load.acked_requests + 20, timeout=90)  # the kill lands under load
            kind, slot, status = choose_victim(rng, broker)
            killed_at = time.monotonic()
            kill(broker, kind, slot, status)
            recovery[kind].append(time.monotonic() - killed_at)
        load.wait_for_acks(load.acked_requests + 20, timeout=90)
    finally:
        load.stop()
        load.join(timeout=120)
    return load, recovery
