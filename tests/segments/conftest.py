"""Helpers for partition-log tests: a settable clock and message-set builders."""

import pytest

from mpbroker.codec.message import encode_message_set
from mpbroker.segments import LogConfig
from mpbroker.segments.log import Log


class FakeClock:
    """Milliseconds under the test's control: both of a log's clocks (dates for roll and
    retention, the timer for flushes)."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def message_set(count: int, size: int = 20, tag: bytes = b"m") -> bytes:
    return encode_message_set([(tag + b"%06d" % i).ljust(size, b".") for i in range(count)])


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    """Open a log under ``tmp_path`` with the given LogConfig fields."""
    opened = []

    def factory(topic="clicks", partition=0, recover=False, recovery_point=None, **config):
        log = Log.open(str(tmp_path), topic, partition, LogConfig(**config), recover=recover,
                       recovery_point=recovery_point, clock_ms=clock, timer_ms=clock)
        opened.append(log)
        return log

    yield factory
    for log in opened:
        for segment in log._segments:
            segment.close()
