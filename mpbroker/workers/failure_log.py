"""Logging a failure that repeats (a partition's appends failing while the disk is
full) without flooding the log: the first failure is logged at once, the ones after
it at most once per interval with how many there were, and the first success after
them says the failures are over."""

import logging
import time

REPEAT_INTERVAL_S = 10.0


class RepeatedFailureLog:
    def __init__(self, logger: logging.Logger, interval_s: float = REPEAT_INTERVAL_S, clock=time.monotonic):
        self._log = logger
        self._interval_s = interval_s
        self._clock = clock
        self.failing = {}  # key -> [failures since the last line, time of the last line, failures in all]

    def failed(self, key, reason: str) -> None:
        now = self._clock()
        entry = self.failing.get(key)
        if entry is None:
            self.failing[key] = [0, now, 1]
            self._log.error("%s", reason)
            return
        entry[0] += 1
        entry[2] += 1
        if now - entry[1] >= self._interval_s:
            self._log.error("%s (and %d more failures in the last %.0f s)", reason, entry[0], now - entry[1])
            entry[0] = 0
            entry[1] = now

    def succeeded(self, key, what: str) -> None:
        """Call after a success of ``key`` while ``failing`` is not empty (a dict test on the hot path)."""
        entry = self.failing.pop(key, None)
        if entry is not None:
            self._log.warning("%s works again after %d failures", what, entry[2])
