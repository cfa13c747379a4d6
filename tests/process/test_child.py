"""The child-process skeleton (mpbroker.process.child.ChildProcess) in a real forked
process: ``ready`` once started, the heartbeat in the shared slot table, the control
messages (stop, reload, a subclass's own, an unknown one), TERM, INT, the supervisor's
end closing, a start that refuses, and busy polling: its window, adapted to the gaps
between events, and its end."""

import os
import select
import signal
import time

import pytest

from mpbroker.clock import monotonic_ms
from mpbroker.ipc.control import ControlChannel, Op
from mpbroker.ipc.slot_table import SlotTable
from mpbroker.process.child import ChildProcess, PollWindow
from mpbroker.testing.process_cpu import cpu_seconds

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


def cpu_over(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def echo_every(channel, gap_s: float, count: int) -> None:
    """``count`` events ``gap_s`` apart, each answered before the next."""
    for slot in range(count):
        time.sleep(gap_s)
        channel.send(Op.WORKER_UP, slot=slot)
        assert receive(channel) == {"op": "echo", "slot": slot}


@pytest.mark.parametrize("busy_poll_s", [0.0, 0.6])
def test_events_within_the_ceiling_open_a_polling_window_that_ends(probe, busy_poll_s):
    start, _ = probe
    pid, channel = start(busy_poll_s=busy_poll_s)
    assert receive(channel)["op"] == "ready"
    time.sleep(0.3)
    assert cpu_over(pid, 0.5) < 0.05, "an idle loop polled"
    # 0.12 s apart, within the 0.6 s ceiling: the window doubles from 20 us at each one
    # until it is past the gap (0.164 s after 14 events)
    echo_every(channel, 0.12, 14)
    polled = cpu_over(pid, 0.14)  # inside the window after the last event
    if busy_poll_s:
        assert polled > 0.04, f"{polled:.2f} s of CPU: it slept instead of polling"
    else:
        assert polled < 0.05, f"{polled:.2f} s of CPU without busy polling"
    time.sleep(0.1)
    assert cpu_over(pid, 0.5) < 0.05, "the loop went on polling after its window"


def test_events_further_apart_than_the_ceiling_are_never_polled_for(probe):
    start, _ = probe
    pid, channel = start(busy_poll_s=0.05)
    assert receive(channel)["op"] == "ready"
    before = cpu_seconds(pid)
    echo_every(channel, 0.12, 10)
    assert cpu_seconds(pid) - before < 0.06, "it polled for events 0.12 s apart with a 0.05 s ceiling"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def window_after_gaps(ceiling_s: float, gaps: list) -> PollWindow:
    clock = FakeClock()
    window = PollWindow(ceiling_s, clock)
    window.woke()  # the first event: no gap before it
    for gap in gaps:
        clock.now += gap
        window.woke()
    return window


def test_the_poll_window_doubles_until_it_is_past_the_gap_and_stays_under_the_ceiling():
    start = PollWindow.GROW_START_S
    assert window_after_gaps(1e-3, [50e-6]).window == start  # the first event after a sleep opens it
    assert window_after_gaps(1e-3, [50e-6] * 3).window == 4 * start  # 80 us: past the 50 us gap
    assert window_after_gaps(1e-3, [50e-6] * 10).window == 4 * start  # and it stays there
    assert window_after_gaps(100e-6, [90e-6] * 10).window == 100e-6  # never past the ceiling


def test_a_gap_past_the_ceiling_halves_the_window_and_shuts_it_below_the_start():
    start = PollWindow.GROW_START_S
    grown = [50e-6] * 3  # 80 us
    assert window_after_gaps(1e-3, grown + [2e-3]).window == 2 * start
    assert window_after_gaps(1e-3, grown + [2e-3] * 2).window == start
    assert window_after_gaps(1e-3, grown + [2e-3] * 3).window == 0.0
    assert window_after_gaps(1e-3, [5.0]).window == 0.0


def test_the_window_is_open_only_that_long_after_the_last_event_and_a_caught_event_keeps_it():
    clock = FakeClock()
    window = PollWindow(1e-3, clock)
    window.woke()
    assert not window.open()  # shut until events come close together
    for _ in range(3):
        clock.now += 50e-6
        window.woke()
    clock.now += 70e-6
    assert window.open()
    window.caught()
    clock.now += 70e-6
    assert window.open(), "an event caught while polling starts the window again"
    assert window.window == 80e-6
    clock.now += 20e-6
    assert not window.open()
    assert not PollWindow(0.0).open()
