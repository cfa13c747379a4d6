"""systemd's side of sd_notify for tests: an AF_UNIX datagram socket a broker is given as
``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract namespace, as systemd may pass),
and a launcher that starts ``mpbroker serve`` without waiting for it, so a test sees
each notification the moment it arrives."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


class Notification:
    """One datagram: ``fields`` (KEY -> value), ``raw`` text, ``at`` (time.monotonic())."""

    def __init__(self, raw: str, at: float):
        self.raw = raw
        self.at = at
        self.fields = dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)

    def __repr__(self) -> str:
        return f"Notification({self.raw!r})"


class NotifySocket:
    def __init__(self, abstract: bool = False):
        self._directory = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        if abstract:
            name = f"mpbroker-test-{os.getpid()}-{id(self):x}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:  # a short path: AF_UNIX paths end at 107 bytes, and pytest's tmp_path can be longer
            self._directory = tempfile.mkdtemp(prefix="sdn")
            self.address = os.path.join(self._directory, "notify")
            self.sock.bind(self.address)
        self.received = []

    def receive(self, timeout: float):
        """The next notification, or None after ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return None
        notification = Notification(data.decode(), time.monotonic())
        self.received.append(notification)
        return notification

    def wait_for(self, key: str, value: str = "1", timeout: float = 30.0, detail=None) -> Notification:
        """The next notification with ``key=value``; the ones before it stay in ``received``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            notification = self.receive(left) if left > 0 else None
            if notification is None:
                extra = f"\n{detail()}" if detail else ""
                raise AssertionError(f"no {key}={value} within {timeout}s; got {self.received}{extra}")
            if notification.fields.get(key) == value:
                return notification

    def close(self) -> None:
        self.sock.close()
        if self._directory:
            shutil.rmtree(self._directory, ignore_errors=True)


def launch(broker, env: dict, watchdog_pid: bool = False) -> None:
    """Start ``mpbroker serve`` for ``broker`` (a LocalBroker) with ``env`` added, without
    waiting for anything (``LocalBroker.start`` waits until the broker is ready). With
    ``watchdog_pid``, ``$WATCHDOG_PID`` is the broker's own pid, as systemd sets it (a
    shell exports its pid, then execs the broker in its place)."""
    command = [sys.executable, "-m", "mpbroker", "serve", broker.config_path]
    if watchdog_pid:
        command = ["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"', *command]
    with open(broker.output_path, "a") as output:
        broker.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                                          env={**os.environ, **env})


def ready_port(notification: Notification) -> int:
    """The port READY=1's STATUS= names ("accepting on port N...")."""
    status = notification.fields["STATUS"]
    assert status.startswith("accepting on port "), status
    return int(status.split()[3].rstrip(","))
