"""Steps of the date under a running broker: flushes, heartbeats and back-offs run on the
monotonic clock (``mpbroker/clock.py``), so setting the date back or forward neither holds
a flush nor kills a child.

The broker runs under libfaketime (Debian's ``libfaketime``, installed by tests/run.sh):
``LD_PRELOAD`` fakes the wall clock of every broker process from an offset the test
rewrites in ``FAKETIME_TIMESTAMP_FILE`` (read at every call: ``FAKETIME_NO_CACHE``), and
leaves the monotonic clock alone (``FAKETIME_DONT_FAKE_MONOTONIC``). Each test first checks
that the broker's date did move (the time stamp of a log line), so it cannot pass with the
fake clock silently not applied.
"""

import os
import time

import pytest

from mpbroker.codec.message import encode_message_set
from tests.broker.wire import WireClient
from tests.faults.netcluster.clock import broker_date_offset_s, build_sleep_fix
from tests.polling import wait_for

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
FLUSH_INTERVAL_MS = 200
HEARTBEAT_TIMEOUT_MS = 3000



@pytest.fixture(autouse=True)
def libfaketime_present():
    """Without it these tests cannot step the date: fail loudly rather than pass unnoticed."""
    if not os.path.exists(LIBFAKETIME):
        pytest.fail(f"{LIBFAKETIME} is missing: install Debian's libfaketime (tests/run.sh does)")


class FakeDate:
    """The broker's date offset from the real one, in libfaketime's relative format.
    ``sleep_fix`` goes before libfaketime: without it, libfaketime 0.9.10 makes every
    ``time.sleep`` in the broker raise EINVAL (``tests/faults/netcluster/clock.py``)."""

    def __init__(self, directory, sleep_fix: str):
        self.path = os.path.join(str(directory), "faketime")
        self.sleep_fix = sleep_fix
        self.set("+0")

    def set(self, offset: str) -> None:
        """``offset`` like ``-1h`` or ``+1h``: the broker's date steps to now plus that."""
        temporary = self.path + ".new"
        with open(temporary, "w") as f:
            f.write(offset + "\n")
        os.replace(temporary, self.path)  # a reader sees the old offset or the new, never half

    @property
    def env(self) -> dict:
        return {"LD_PRELOAD": f"{self.sleep_fix} {LIBFAKETIME}", "FAKETIME_TIMESTAMP_FILE": self.path,
                "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.fixture(scope="module")
def sleep_fix(tmp_path_factory):
    return build_sleep_fix(str(tmp_path_factory.mktemp("sleep-fix")))


@pytest.fixture
def fake_date(tmp_path, sleep_fix):
    return FakeDate(tmp_path, sleep_fix)


@pytest.fixture
def faked_broker(broker_factory, fake_date):
    return broker_factory(env=fake_date.env, log_default_flush_interval_ms=FLUSH_INTERVAL_MS,
                          log_default_flush_scheduler_interval_ms=FLUSH_INTERVAL_MS,
                          worker_heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)




def step_date(broker, fake_date, offset: str, expected_s: float) -> None:
    fake_date.set(offset)
    seen = broker_date_offset_s(broker, broker.port)
    assert abs(seen - expected_s) < 60, "the broker's date did not move: no libfaketime?"


def produce_and_time_until_fetchable(broker, topic: str, payloads, timeout: float = 5.0) -> float:
    """Fire-and-forget produce, then seconds until a fetch returns the messages."""
    expected = encode_message_set(payloads)
    with WireClient(broker.port) as client:
        client.produce(topic, 0, payloads)
        started = time.monotonic()
        wait_for(lambda: client.fetch(topic, 0, 0) == (0, expected), timeout, f"{topic} fetchable", broker.output,
                 interval=0.02)
        return time.monotonic() - started


def process_ids(status: dict) -> list:
    return [status["acceptor"]["pid"]] + [worker["pid"] for worker in status["workers"]]


def restarts(status: dict) -> list:
    return [status["acceptor"]["restarts"]] + [worker["restarts"] for worker in status["workers"]]


def test_after_a_step_back_new_messages_are_flushed_on_time(faked_broker, fake_date):
    broker = faked_broker
    produce_and_time_until_fetchable(broker, "before", [b"flush timers running"])
    pids = process_ids(broker.status())
    step_date(broker, fake_date, "-1h", -3600)
    for n in range(3):  # not once by luck: every flush after the step
        took = produce_and_time_until_fetchable(broker, f"after-{n}", [b"after the step back", str(n).encode()])
        assert took < 3, f"messages produced after the step back took {took:.1f}s to become fetchable"
    status = broker.status()
    assert process_ids(status) == pids and restarts(status) == [0, 0, 0]


def test_a_step_forward_past_the_heartbeat_timeout_restarts_nothing(faked_broker, fake_date):
    broker = faked_broker
    step_date(broker, fake_date, "-1h", -3600)  # an hour back, then two hours forward
    time.sleep(1.5)
    pids = process_ids(broker.status())
    step_date(broker, fake_date, "+1h", 3600)
    time.sleep(HEARTBEAT_TIMEOUT_MS / 1000 + 2)  # past the heartbeat timeout and two more checks
    status = broker.status()
    assert restarts(status) == [0, 0, 0], broker.output()
    assert process_ids(status) == pids
    assert "sent no heartbeat" not in broker.output()
    took = produce_and_time_until_fetchable(broker, "after-forward", [b"after the step forward"])
    assert took < 3
