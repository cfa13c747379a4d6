"""The supervisor's control socket, which ``mpbroker-ctl`` talks to.

A unix stream socket under ``log.dir`` unless ``control.socket`` says otherwise, mode
0600 (only the broker's user), or 0660 with ``control.socket.group`` as its group (the
group's members also need search permission on the directories above it). The socket
is created 0600 and opened to the group only after its group was set, so nobody else
can connect in between. One request per connection: a JSON line
``{"command": ...}`` in, a JSON line out. The supervisor's loop owns the listening
socket; ``handle`` runs the command through a callback and writes the answer.
"""

import json
import logging
import os
import socket

from mpbroker.config import group_id

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024


class ControlServerError(Exception):
    pass


class ControlServer:
    def __init__(self, path: str, group: str = ""):
        self.path = path
        if len(os.fsencode(path)) >= 108:
            raise ControlServerError(f"control socket path {path!r} is too long for a unix socket (max 107 bytes)")
        self._remove_stale()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)
        try:
            self.sock.bind(path)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        if group:
            os.chown(path, -1, group_id(group))
            os.chmod(path, 0o660)
        self.sock.listen(16)
        self.sock.setblocking(False)

    def _remove_stale(self) -> None:
        if not os.path.exists(self.path):
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)  # left behind by a broker that did not stop cleanly
            return
        finally:
            probe.close()
        raise ControlServerError(f"another broker answers on {self.path}")

    def fileno(self) -> int:
        return self.sock.fileno()

    def handle(self, run_command) -> None:
        """Accept one client, read its request, answer with ``run_command(request)``."""
        try:
            client, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        with client:
            client.settimeout(2.0)
            try:
                data = b""
                while not data.endswith(b"\n") and len(data) < MAX_REQUEST_BYTES:
                    chunk = client.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                request = json.loads(data or b"{}")
                answer = run_command(request)
            except (OSError, ValueError) as exc:
                answer = {"ok": False, "error": f"bad control request: {exc}"}
            try:
                client.sendall(json.dumps(answer).encode() + b"\n")
            except OSError as exc:
                log.info("control client went away: %s", exc)

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
