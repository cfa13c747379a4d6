"""The client side of the supervisor's control socket (``control_server``): one JSON
command in, one JSON answer out. ``mpbroker-ctl``, the local broker of the tests and the
benchmarks use it."""

import json
import socket


class NotRunning(Exception):
    """Nothing answers on the control socket; ``missing`` when there is no broker there
    at all (no socket file, or a stale one), as opposed to one that cannot be used."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing



def call(path: str, command: str, timeout: float = 10.0) -> dict:
    """Send one command to the control socket at ``path``; return the answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except FileNotFoundError:
        raise NotRunning(f"no broker is running: {path} does not exist", missing=True) from None
    except ConnectionRefusedError:
        raise NotRunning(f"no broker is running: nothing answers on {path} (stale socket)", missing=True) from None
    except PermissionError:
        raise NotRunning(f"permission denied on {path}: run as the broker's user") from None
    with sock:
        sock.sendall(json.dumps({"command": command}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    if not data:
        raise NotRunning(f"the broker closed {path} without answering")
    return json.loads(data)
