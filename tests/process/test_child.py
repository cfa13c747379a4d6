"""The child-process skeleton (mpbroker.process.child.ChildProcess) in a real forked
process: ``ready`` once started, the heartbeat in the shared slot table, the control
messages (stop, reload, a subclass's own, an unknown one), TERM, INT, the supervisor's
end closing, a start that refuses, and busy polling that ends."""

import os
import select
import signal
import time

import pytest

from mpbroker.clock import monotonic_ms
from mpbroker.ipc.control import ControlChannel, Op
from mpbroker.ipc.slot_table import SlotTable
from mpbroker.process.child import ChildProcess

SLOT = 1


class Probe(ChildProcess):
    """Reports what the skeleton made it do, over its own control channel."""

    def __init__(self, slots, channel, refuse: bool = False, busy_poll_s: float = 0.0):
        super().__init__(slots, SLOT, channel)
        self.refuse = refuse
        self.busy_poll_s = busy_poll_s

    def start(self):
        return 4 if self.refuse else None

    def ready_fields(self) -> dict:
        return {"pid": os.getpid()}

    def control_handlers(self) -> dict:
        return {Op.WORKER_UP: lambda message: self.control.send("echo", slot=message["slot"])}

    def reload(self, properties: dict) -> None:
        self.control.send("reloaded", level=properties["log.level"])

    def finish(self) -> int:
        self.control.send("finished")
        return 7


@pytest.fixture
def probe():
    slots = SlotTable(4)
    started = []

    def start(refuse=False, busy_poll_s=0.0):
        parent, child = ControlChannel.pair()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                parent.close()
                code = Probe(slots, child, refuse, busy_poll_s).run()
            finally:
                os._exit(code)
        child.close()
        started.append(pid)
        return pid, parent

    yield start, slots
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def receive(channel, timeout=10.0):
    ready, _, _ = select.select([channel.fileno()], [], [], timeout)
    assert ready, "no message from the child"
    return channel.receive()


def exit_code(pid, timeout=10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    raise AssertionError("the child did not exit")


def test_ready_heartbeat_and_a_stop_that_runs_finish(probe):
    start, slots = probe
    pid, channel = start()
    assert receive(channel) == {"op": "ready", "pid": pid}
    first = slots.read(SLOT).heartbeat_ms
    assert monotonic_ms() - first < 2000
    time.sleep(1.2)
    assert slots.read(SLOT).heartbeat_ms > first  # every 500 ms
    channel.send(Op.STOP)
    assert receive(channel) == {"op": "finished"}
    assert exit_code(pid) == 7


def test_reload_a_subclass_message_and_an_unknown_one(probe):
    start, _ = probe
    pid, channel = start()
    assert receive(channel)["op"] == "ready"
    channel.send("no_such_op")
    channel.send(Op.RELOAD, properties={"log.level": "DEBUG"})
    assert receive(channel) == {"op": "reloaded", "level": "DEBUG"}
    channel.send(Op.WORKER_UP, slot=3)
    assert receive(channel) == {"op": "echo", "slot": 3}


def test_term_stops_gracefully(probe):
    start, _ = probe
    pid, channel = start()
    assert receive(channel)["op"] == "ready"
    os.kill(pid, signal.SIGTERM)
    assert receive(channel) == {"op": "finished"}
    assert exit_code(pid) == 7


def test_int_exits_at_once_without_the_stop(probe):
    start, _ = probe
    pid, channel = start()
    assert receive(channel)["op"] == "ready"
    os.kill(pid, signal.SIGINT)
    assert exit_code(pid) == 0
    assert receive(channel) is None  # no "finished": the channel just closed


def test_the_supervisors_end_closing_stops_it(probe):
    start, _ = probe
    pid, channel = start()
    assert receive(channel)["op"] == "ready"
    channel.close()
    assert exit_code(pid) == 7


def test_a_start_that_refuses_exits_with_its_code_and_is_never_ready(probe):
    start, _ = probe
    pid, channel = start(refuse=True)
    assert exit_code(pid) == 4
    assert receive(channel) is None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat_file:
        fields = stat_file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_over(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


@pytest.mark.parametrize("busy_poll_s", [0.0, 0.6])
def test_busy_polling_lasts_its_window_after_an_event_then_the_loop_sleeps(probe, busy_poll_s):
    start, _ = probe
    pid, channel = start(busy_poll_s=busy_poll_s)
    assert receive(channel)["op"] == "ready"
    time.sleep(busy_poll_s + 0.3)  # past the window of the ready message's events
    assert cpu_over(pid, 0.5) < 0.05, "the loop polled with no event in its window"
    channel.send(Op.WORKER_UP, slot=1)  # an event
    assert receive(channel) == {"op": "echo", "slot": 1}
    polled = cpu_over(pid, 0.4)  # inside the window
    if busy_poll_s:
        assert polled > 0.04, f"{polled:.2f} s of CPU: it slept instead of polling"
    else:
        assert polled < 0.05, f"{polled:.2f} s of CPU without busy polling"
    time.sleep(0.3)
    assert cpu_over(pid, 0.5) < 0.05, "the loop went on polling after its window"
