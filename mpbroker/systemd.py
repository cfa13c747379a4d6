"""The systemd notification protocol (sd_notify), without libsystemd: one datagram to
``$NOTIFY_SOCKET`` per state change. Outside systemd every call is a no-op.

What the supervisor sends: READY=1 (with MAINPID= and STATUS=) once it serves,
RELOADING=1 with MONOTONIC_USEC= in the same datagram when a reload begins and READY=1
when it ended (the Type=notify-reload protocol of systemd 253+: systemd matches the
reload to its own signal by that timestamp; plain Type=notify ignores the extra field),
STOPPING=1 when it stops, and WATCHDOG=1 every half of ``$WATCHDOG_USEC``. An address
starting with ``@`` is in the abstract namespace (a leading NUL byte on the wire).

``Watchdog`` keeps the WATCHDOG=1 rhythm. Socket activation (sd_listen_fds):
``listen_fds`` says how many listening sockets systemd passed, from fd 3 on, when they
are meant for this process."""

import os
import socket
import time


def notify(state: str) -> bool:
    """Send ``state`` (newline-separated ``KEY=value`` lines); False when not under
    systemd or when the socket cannot take it."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto(state.encode(), address)
        except OSError:
            return False
    return True


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds: the clock systemd's MONOTONIC_USEC= is on."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def reloading() -> bool:
    """RELOADING=1 and MONOTONIC_USEC= in one datagram (READY=1 must follow)."""
    return notify(f"RELOADING=1\nMONOTONIC_USEC={monotonic_usec()}")


def watchdog_interval_s():
    """Half the watchdog timeout systemd set for us (when it is meant for this pid), or None."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and (not pid.isdigit() or int(pid) != os.getpid())):
        return None
    return int(usec) / 2_000_000


class Watchdog:
    """WATCHDOG=1 every half of $WATCHDOG_USEC (nothing outside systemd's watchdog)."""

    def __init__(self):
        self._next = 0.0

    def seconds_left(self, now: float) -> float:
        """Until the next WATCHDOG=1 is due (inf without a watchdog); ``now`` is time.monotonic()."""
        return max(0.0, self._next - now) if watchdog_interval_s() else float("inf")

    def tick(self, now: float) -> None:
        interval = watchdog_interval_s()
        if interval and now >= self._next:
            notify("WATCHDOG=1")
            self._next = now + interval


LISTEN_FDS_START = 3  # the first socket systemd passes


def listen_fds() -> int:
    """How many sockets systemd passed this process (from LISTEN_FDS_START on), 0 when
    none; the variables are removed from this process's environment, as
    sd_listen_fds(unset_environment=1) does, so the children do not see them."""
    count = os.environ.get("LISTEN_FDS", "")
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or not count.isdigit() or int(count) < 1:
        return 0
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    return int(count)
