"""Each broker's own date, for clock steps: libfaketime's offset file per broker.

Owns the files and the environment, and the probe of a broker's date
(``broker_date_offset_s``, shared with ``tests/faults/test_clock_steps.py``). Every broker of a ``NetCluster``
runs with Debian's libfaketime preloaded and its own ``FAKETIME_TIMESTAMP_FILE``,
holding ``+0`` (the real date) until a step writes another offset, e.g. ``-3600`` (an
hour back); ``FAKETIME_NO_CACHE`` makes every clock call read the file, so the step
applies at once and the heal (``+0`` again) too, and ``FAKETIME_DONT_FAKE_MONOTONIC``
leaves the monotonic clock alone, as a real step of the date (``date -s``, an NTP
step) does. The file is replaced whole (a rename), so a reader sees the old offset or
the new, never half of one.

libfaketime goes after any other preloaded library (the power-cut shim), so that both
load: the shim wraps file calls, libfaketime the clock calls; neither wraps the other's.
Just before it goes ``monotonic_sleep.c`` (compiled by ``build_sleep_fix``, as the
power-cut shim is): libfaketime 0.9.10 breaks absolute sleeps on the monotonic clock
when that clock is not faked (its issue 426), which is how Python 3.11's ``time.sleep``
sleeps, so without it every ``time.sleep`` in a broker raised EINVAL (kazoo's
reconnecting thread died of it when ZooKeeper restarted, and the broker's registrar
went silent until its supervisor killed it).

ZooKeeper is left out, on the real date. Its JVM does run under libfaketime (a znode's
``mtime`` shows the stepped date, and its sessions, timed on the monotonic clock,
survive steps), but with ``FAKETIME_DONT_FAKE_MONOTONIC`` every request became slow
(measured here: 300 ``set`` calls from one client took 6-25 s, 0.4 s without the
library; with or without ``FAKETIME_NO_CACHE``), so every schedule ran several times
slower and with a fraction of its load. With the monotonic clock faked too it is fast
again, but then a step of ZooKeeper's date also jumps the clock its session timeouts
run on, which no real step of the date does: not the fault the schedules mean.
"""

import datetime
import itertools
import os
import shutil
import subprocess
import time

from mpbroker.codec.message import encode_message_set
from tests.broker.wire import WireClient
from tests.polling import wait_for

SLEEP_FIX_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "monotonic_sleep.c")
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class ClockUnavailable(RuntimeError):
    """libfaketime is not installed, so no server's date can be stepped."""


def check_available() -> None:
    if not os.path.exists(LIBFAKETIME):
        raise ClockUnavailable(f"{LIBFAKETIME} is missing: install Debian's libfaketime (tests/run.sh does)")


def build_sleep_fix(directory: str) -> str:
    """Compile ``monotonic_sleep.c`` into ``directory``: the library's path."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ClockUnavailable("no C compiler (cc or gcc) to build the monotonic sleep fix")
    os.makedirs(directory, exist_ok=True)
    library = os.path.join(directory, "monotonic_sleep.so")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-o", library, SLEEP_FIX_SOURCE, "-ldl"],
                   check=True, capture_output=True, text=True)
    return library


class FakeClock:
    """One broker's date: the real one plus ``offset_s`` (0 until ``step``); ``sleep_fix``
    is ``build_sleep_fix``'s library."""

    def __init__(self, directory: str, sleep_fix: str):
        self.sleep_fix = sleep_fix
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "faketime")
        self.offset_s = 0.0
        self.step(0)

    def step(self, offset_s: float) -> None:
        """The broker's date becomes the real one plus ``offset_s`` seconds (0: real time)."""
        temporary = self.path + ".new"
        with open(temporary, "w") as file:
            file.write(f"{offset_s:+.0f}\n")
        os.replace(temporary, self.path)
        self.offset_s = offset_s

    def environment(self, base: dict | None = None) -> dict:
        """``base`` (e.g. the power-cut shim's environment) with libfaketime preloaded
        after whatever it preloads."""
        base = dict(base or {})
        preload = " ".join(filter(None, [base.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", "")), self.sleep_fix,
                                         LIBFAKETIME]))
        return {**base, "LD_PRELOAD": preload, "FAKETIME_TIMESTAMP_FILE": self.path, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"}



_probes = itertools.count()


def broker_date_offset_s(broker, port: int, host: str = "127.0.0.1") -> float:
    """How far a running broker's date is from the real one (0 within the probe's time):
    the time stamp of the line its acceptor logs for a produce to an illegal topic name,
    against the real time around it. A probe that changes nothing (a reload, say, would
    re-arm the workers' timers); ``broker`` has ``output()``, its log so far."""
    probe = f"date probe {next(_probes)}!"
    before = time.time()
    with WireClient(port, host=host) as client:
        assert client.produce_acked(probe, 0, encode_message_set([b"x"])).error != 0
    after = time.time()
    line = wait_for(lambda: [line for line in broker.output().splitlines() if probe in line], 5,
                    "the probe's log line", broker.output)[0]
    logged = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return 0.0 if before - 0.01 <= logged <= after + 0.01 else logged - (before + after) / 2
