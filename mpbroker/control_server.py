"""The supervisor's control socket, which ``mpbroker-ctl`` talks to.

A unix stream socket under ``log.dir`` unless ``control.socket`` says otherwise, mode
0600 (only the broker's user), or 0660 with ``control.socket.group`` as its group (the
group's members also need search permission on the directories above it). The socket
is created 0600 and opened to the group only after its group was set, so nobody else
can connect in between. One request per connection: a JSON line
``{"command": ...}`` in, a JSON line out.

It runs inside the supervisor's loop, which must never stop or wait for a client (the
loop reaps and respawns the children), so:

- every client socket is non-blocking and registered in the supervisor's selector; a
  request is gathered as its bytes come, at most ``MAX_REQUEST_BYTES``;
- an answer is written as far as the client takes it, the rest when it is writable
  again; an answer over ``MAX_ANSWER_BYTES``, or one that would take the bytes waiting
  for all clients past ``MAX_UNSENT_BYTES``, is replaced by an error;
- a client has ``REQUEST_DEADLINE_S`` from its connection to send a whole line and
  ``ANSWER_DEADLINE_S`` to read its answer; ``tick`` (from the supervisor's once-a-second
  checks) closes the late ones;
- at most ``MAX_CLIENTS`` are open at once; one more is told so, and closed
  ``REFUSED_LINGER_S`` later (closed at once, the request its client is still sending
  would fail with EPIPE before it reads why);
- a request that is not a JSON object with a string ``"command"`` (not UTF-8, not JSON,
  nested too deep, too long) is answered ``{"ok": false, "error": ...}`` and runs nothing;
  a command that raises is answered the same way (traceback in the log).
"""

import collections
import errno
import itertools
import json
import logging
import os
import re
import selectors
import socket
import time

from mpbroker.config.values import group_id

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024
MAX_REQUEST_NESTING = 32
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a status of about 350,000 partitions
MAX_UNSENT_BYTES = 2 * MAX_ANSWER_BYTES  # all clients together
MAX_CLIENTS = 16
REQUEST_DEADLINE_S = 5.0
ANSWER_DEADLINE_S = 10.0
REFUSED_LINGER_S = 1.0
ACCEPT_PAUSE_S = 0.1  # out of file descriptors: the listener is left alone until a tick after this

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_QUOTED = re.compile(r'"[^"]*"')
_BRACKET = re.compile(r"[\[\]{}]")


class ControlServerError(Exception):
    pass


class BadRequest(ValueError):
    """A control request that cannot be run; the message says why."""


def parse_request(line: bytes) -> dict:
    """The request in one line (without its newline), or BadRequest saying what is wrong."""
    if len(line) > MAX_REQUEST_BYTES:
        raise BadRequest(f"request longer than {MAX_REQUEST_BYTES} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if nesting_depth(text) > MAX_REQUEST_NESTING:
        raise BadRequest(f"request nested deeper than {MAX_REQUEST_NESTING} levels")
    try:
        request = json.loads(text)
    except RecursionError:
        raise BadRequest("request nested too deep") from None
    except ValueError as exc:
        raise BadRequest(f"request is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest(f'request is a JSON {type(request).__name__}, not an object like {{"command": "status"}}')
    if not isinstance(request.get("command"), str):
        raise BadRequest('request has no "command" string')
    return request


def nesting_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text``, brackets inside strings left out (linear
    time: escapes go first, then whole strings)."""
    bare = _QUOTED.sub("", _ESCAPE.sub("", text))
    steps = (1 if bracket in "[{" else -1 for bracket in _BRACKET.findall(bare))
    return max(itertools.accumulate(steps), default=0)


def encode_answer(answer: dict) -> bytes:
    line = json.dumps(answer).encode() + b"\n"
    if len(line) > MAX_ANSWER_BYTES:
        log.error("control answer of %d bytes is over the limit of %d; not sent", len(line), MAX_ANSWER_BYTES)
        return encode_answer({"ok": False, "error": f"the answer ({len(line)} bytes) is over the limit of "
                                                    f"{MAX_ANSWER_BYTES} bytes"})
    return line


class ControlClient:
    """One connection: its request as it arrives, then its answer as it leaves."""

    def __init__(self, sock: socket.socket, now: float):
        self.sock = sock
        self.fd = sock.fileno()
        self.received = bytearray()
        self.output = None  # memoryview of the answer's bytes not yet sent, once there is one
        self.deadline = now + REQUEST_DEADLINE_S

    @property
    def answering(self) -> bool:
        return self.output is not None


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
        self.clients = {}  # fd -> ControlClient
        self._refused = collections.deque()  # (close at, socket) told "too many clients"
        self._selector = None
        self._run_command = None
        self._accept_paused_until = None

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

    # --- in the supervisor's loop ---------------------------------------------------

    def attach(self, selector: selectors.BaseSelector, run_command) -> None:
        """Register in the supervisor's selector (every key's data is ``"ctl"``); requests
        are answered with ``run_command(request)``."""
        self._selector = selector
        self._run_command = run_command
        selector.register(self.sock, selectors.EVENT_READ, "ctl")

    def on_ready(self, fd: int, events: int) -> None:
        """A registered socket is readable or writable: the listener or a client. Whatever
        goes wrong here is logged and costs at most that client, never the supervisor."""
        client = None
        try:
            if fd == self.sock.fileno():
                self._accept()
                return
            client = self.clients.get(fd)
            if client is None:
                return
            if client.answering:
                self._send(client)
            else:
                self._receive(client)
        except Exception:
            log.exception("control socket: unexpected error")
            if client is not None:
                self._close(client)

    def tick(self, now: float) -> None:
        """Close the clients past their deadline; take the listener back after a pause."""
        try:
            for client in [client for client in self.clients.values() if now > client.deadline]:
                if client.answering:
                    log.warning("control client did not read its answer within %.0fs; closed", ANSWER_DEADLINE_S)
                    self._close(client)
                else:
                    log.warning("control client sent no whole request within %.0fs; closed", REQUEST_DEADLINE_S)
                    self._refuse(client, f"no whole request line within {REQUEST_DEADLINE_S:.0f}s")
            while self._refused and now >= self._refused[0][0]:
                self._refused.popleft()[1].close()
            if self._accept_paused_until is not None and now >= self._accept_paused_until:
                self._accept_paused_until = None
                self._selector.register(self.sock, selectors.EVENT_READ, "ctl")
        except Exception:
            log.exception("control socket: unexpected error")

    def _accept(self) -> None:
        for _ in range(MAX_CLIENTS):
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("control socket: cannot accept (%s); trying again in %.1fs", exc.strerror,
                              ACCEPT_PAUSE_S)
                    self._selector.unregister(self.sock)
                    self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S
                else:
                    log.error("control socket: cannot accept: %s", exc)
                return
            sock.setblocking(False)
            if len(self.clients) >= MAX_CLIENTS:
                self._refuse_one_more(sock)
                continue
            client = ControlClient(sock, time.monotonic())
            self.clients[client.fd] = client
            self._selector.register(sock, selectors.EVENT_READ, "ctl")

    def _refuse_one_more(self, sock: socket.socket) -> None:
        log.warning("control socket: %d clients open already; one more refused", len(self.clients))
        try:
            sock.send(encode_answer({"ok": False, "error": f"too many control clients ({MAX_CLIENTS}) open at "
                                                           "once; try again"}), socket.MSG_NOSIGNAL)
            sock.shutdown(socket.SHUT_WR)  # the answer, then the end: the client need not wait for the close
        except OSError:
            pass
        self._refused.append((time.monotonic() + REFUSED_LINGER_S, sock))
        while len(self._refused) > MAX_CLIENTS:
            self._refused.popleft()[1].close()

    def _receive(self, client: ControlClient) -> None:
        try:
            data = client.sock.recv(MAX_REQUEST_BYTES + 1 - len(client.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        if not data and not client.received:
            self._close(client)  # went away without a request
            return
        client.received += data
        end = client.received.find(b"\n")
        if end < 0 and data and len(client.received) <= MAX_REQUEST_BYTES:
            return  # more to come
        line = bytes(client.received[:end] if end >= 0 else client.received)  # EOF ends a line too
        self._answer(client, self._run(line))

    def _run(self, line: bytes) -> dict:
        try:
            request = parse_request(line)
        except BadRequest as exc:
            log.warning("control request refused: %s", exc)
            return {"ok": False, "error": f"bad control request: {exc}"}
        try:
            return self._run_command(request)
        except Exception as exc:  # the supervisor goes on whatever one command does
            log.exception("control command %r failed", request["command"][:64])
            return {"ok": False, "error": f"the command failed: {exc!r}"}

    def _answer(self, client: ControlClient, answer: dict) -> None:
        try:
            line = encode_answer(answer)
        except (TypeError, ValueError) as exc:
            log.exception("control answer cannot be encoded")
            line = encode_answer({"ok": False, "error": f"the answer cannot be encoded: {exc}"})
        unsent = sum(len(other.output) for other in self.clients.values() if other.answering)
        if unsent + len(line) > MAX_UNSENT_BYTES:
            log.warning("control answer of %d bytes refused: %d bytes wait for other clients", len(line), unsent)
            line = encode_answer({"ok": False, "error": f"{unsent} bytes of answers wait for other control "
                                                        "clients; try again"})
        client.output = memoryview(line)
        client.deadline = time.monotonic() + ANSWER_DEADLINE_S
        self._selector.modify(client.sock, selectors.EVENT_WRITE, "ctl")
        self._send(client)

    def _refuse(self, client: ControlClient, why: str) -> None:
        """Tell a client why it is closed (if it takes the line at once) and close it."""
        try:
            client.sock.send(encode_answer({"ok": False, "error": why}), socket.MSG_NOSIGNAL)
        except OSError:
            pass
        self._close(client)

    def _send(self, client: ControlClient) -> None:
        while client.output:
            try:
                sent = client.sock.send(client.output, socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                return  # the rest when it is writable
            except OSError as exc:
                log.info("control client went away: %s", exc)
                break
            client.output = client.output[sent:]
        self._close(client)

    def _close(self, client: ControlClient) -> None:
        if self.clients.pop(client.fd, None) is None:
            return  # closed already
        try:
            self._selector.unregister(client.fd)
        except (KeyError, ValueError):
            pass
        client.sock.close()

    # --- ends ---------------------------------------------------------------------

    def close_in_child(self) -> None:
        """In a forked child: close the inherited sockets. The selector is not touched:
        its epoll instance is the supervisor's too."""
        self.sock.close()
        for client in self.clients.values():
            client.sock.close()
        for _, sock in self._refused:
            sock.close()

    def close(self) -> None:
        for client in list(self.clients.values()):
            client.sock.close()
        self.clients.clear()
        while self._refused:
            self._refused.popleft()[1].close()
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
