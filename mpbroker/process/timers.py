"""A child process's timers, on the monotonic clock (``clock.monotonic_ms``): a step
of the date neither holds nor hurries a heartbeat, a flush or a sweep.

A timer is an action and the time it is next due; a repeating one is due again one
interval after it ran (not after it was due: a loop that fell behind does not fire a
burst to catch up). ``Timers`` keeps the earliest due time at hand, so the event loop's
two questions, how long may I sleep and is anything due, cost one comparison each when
nothing is. A handful of timers per process: a list, no heap.
"""

from mpbroker.clock import monotonic_ms

_NEVER = float("inf")


class Timer:
    __slots__ = ("interval_ms", "due_ms", "action")

    def __init__(self, interval_ms, due_ms: float, action):
        self.interval_ms = interval_ms  # None: runs once
        self.due_ms = due_ms
        self.action = action  # called with the monotonic time in ms


class Timers:
    def __init__(self):
        self._timers = []
        self.next_due_ms = _NEVER

    def every(self, interval_ms: int, action, now_ms: int | None = None) -> Timer:
        """Run ``action(now_ms)`` every ``interval_ms``, the first time one interval from now."""
        now = monotonic_ms() if now_ms is None else now_ms
        return self._add(Timer(interval_ms, now + interval_ms, action))

    def once(self, delay_ms: float, action, now_ms: int | None = None) -> Timer:
        """Run ``action(now_ms)`` once, ``delay_ms`` from now."""
        now = monotonic_ms() if now_ms is None else now_ms
        return self._add(Timer(None, now + delay_ms, action))

    def restart(self, timer: Timer, interval_ms: int, now_ms: int | None = None) -> None:
        """A new interval for ``timer``, counted from now (a reload changed it)."""
        now = monotonic_ms() if now_ms is None else now_ms
        timer.interval_ms = interval_ms
        timer.due_ms = now + interval_ms
        self._recompute()

    def cancel(self, timer: Timer) -> None:
        if timer in self._timers:
            self._timers.remove(timer)
            self._recompute()

    def seconds_until_next(self, now_ms: int) -> float:
        return max(0.0, self.next_due_ms - now_ms) / 1000

    def run(self, now_ms: int) -> None:
        """Run every timer that is due; a one-shot timer is removed before it runs."""
        if now_ms < self.next_due_ms:
            return
        for timer in list(self._timers):
            if now_ms >= timer.due_ms and timer in self._timers:  # not cancelled by an earlier action
                if timer.interval_ms is None:
                    self._timers.remove(timer)
                else:
                    timer.due_ms = now_ms + timer.interval_ms
                timer.action(now_ms)
        self._recompute()

    def _add(self, timer: Timer) -> Timer:
        self._timers.append(timer)
        self.next_due_ms = min(self.next_due_ms, timer.due_ms)
        return timer

    def _recompute(self) -> None:
        self.next_due_ms = min((timer.due_ms for timer in self._timers), default=_NEVER)
