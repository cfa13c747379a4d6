"""The systemd notification protocol (sd_notify), without libsystemd: one datagram to
``$NOTIFY_SOCKET`` per state change (READY=1, STOPPING=1, RELOADING=1, WATCHDOG=1).
Outside systemd every call is a no-op."""

import os
import socket


def notify(state: str) -> bool:
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


def watchdog_interval_s():
    """Half the watchdog timeout systemd set for us (when it is meant for this pid), or None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000
