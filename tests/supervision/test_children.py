"""The supervisor's process slots (mpbroker.supervision.children): the respawn
back-off, the slot layout, and killing children that overstay their stop deadline
(real processes)."""

import signal
import subprocess
import time

from mpbroker.config.broker_config import config_from_properties
from mpbroker.supervision.children import MAX_RESPAWN_BACKOFF_S, YOUNG_DEATH_S, Child, kill_overdue, make_children


def test_the_back_off_doubles_with_young_deaths_and_resets_after_a_long_life():
    child = Child(0, "worker")
    backoffs = []
    for _ in range(8):
        child.died(YOUNG_DEATH_S / 2)
        backoffs.append(child.backoff)
    assert backoffs[:4] == [0.5, 1.0, 2.0, 4.0]
    assert backoffs[-1] == MAX_RESPAWN_BACKOFF_S
    child.died(YOUNG_DEATH_S + 1)
    assert child.backoff == 0.0


def test_slots_and_names():
    config, _ = config_from_properties({"num.workers": "3", "enable.zookeeper": "true", "zk.connect": "localhost:2181",
                                        "metrics.enable": "false"})
    workers, acceptor, registrar, metrics = make_children(config)
    assert [worker.slot for worker in workers] == [0, 1, 2]
    assert (acceptor.slot, registrar.slot, metrics) == (3, 4, None)
    assert [workers[1].name, workers[1].process_name] == ["worker 1", "mpbroker-w1"]
    assert [registrar.name, registrar.process_name] == ["registrar", "mpbroker-zk"]


def test_kill_overdue_kills_only_children_past_their_deadline():
    late, on_time = Child(0, "worker"), Child(1, "worker")
    processes = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        for child, process in zip((late, on_time), processes):
            child.forked(process.pid)
        now = time.monotonic()
        late.stop_deadline, on_time.stop_deadline = now - 1, now + 60
        assert kill_overdue([late, on_time], now) is True  # both still alive when asked
        assert processes[0].wait(timeout=10) == -signal.SIGKILL
        assert processes[1].poll() is None
    finally:
        for process in processes:
            process.kill()
            process.wait()
