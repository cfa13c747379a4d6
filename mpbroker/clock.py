"""The broker's two clocks, so that every use of time says which one it means.

``monotonic_ms`` measures intervals and deadlines: flush timers, heartbeats, back-offs.
It never steps when an administrator or NTP sets the date, and on Linux
``CLOCK_MONOTONIC`` is one clock for the whole machine, so a heartbeat one process
writes into shared memory can be compared with the time another process reads.

``wall_clock_ms`` is for times that are dates: a segment's creation and modification
time (retention by age, ``log.roll.hours``, OFFSETS before a time), a process's start
time shown to operators, the time of the last flush in the metrics.
"""

import time


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
