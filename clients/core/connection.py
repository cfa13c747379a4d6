"""A blocking connection to one broker: framed requests out, framed responses in,
timeouts, and reconnection with exponential back-off.

Used by one thread at a time (its owner holds a lock or is the only user).
"""

import select
import socket
import time

from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.codec.framing import FrameReader

MAX_RESPONSE_BYTES = 1 << 30
_MAX_BACKOFF_S = 10.0
_MAX_IOV = 1024  # buffers per sendmsg (Linux's IOV_MAX)


class BrokerConnection:
    def __init__(self, host: str, port: int, *, connect_timeout_ms: int = 5000, socket_timeout_ms: int = 30000,
                 backoff_ms: int = 100):
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout_ms / 1000
        self.socket_timeout = socket_timeout_ms / 1000
        self.initial_backoff = backoff_ms / 1000
        self._sock = None
        self._reader = None
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._ever_connected = False
        self.reconnects = 0

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Connect now unless connected; after a failure, wait out the back-off first."""
        if self._sock is not None:
            return
        wait = self._next_attempt - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            self._backoff = min(_MAX_BACKOFF_S, max(self.initial_backoff, self._backoff * 2))
            self._next_attempt = time.monotonic() + self._backoff
            raise BrokerUnavailableError(f"cannot connect to broker {self.host}:{self.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.socket_timeout)
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        self._sock = sock
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._reader = FrameReader(MAX_RESPONSE_BYTES)
        self._backoff = 0.0

    def _peer_closed(self) -> bool:
        """True if the broker closed this connection while it was idle. Checked before
        every send: writing to such a socket succeeds locally and the request is lost
        (a fire-and-forget produce would vanish without an error). Between requests
        nothing else can be waiting to be read."""
        if not self._poller.poll(0):
            return False
        try:
            return self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def send(self, *buffers) -> None:
        """Send one or more requests' buffers with vectored writes; reconnects first if
        needed (also when the broker closed the connection while it was idle). A
        failure closes the connection and raises BrokerUnavailableError."""
        if self._sock is not None and self._peer_closed():
            self.close()
        self.connect()
        try:
            if len(buffers) <= _MAX_IOV:  # usually one write takes it all
                sent = self._sock.sendmsg(buffers)
                if sent == sum(map(len, buffers)):
                    return
            else:
                sent = 0
            pending = [memoryview(buffer) for buffer in buffers if len(buffer)]
            index = 0
            while sent and index < len(pending):  # what the first write took
                if sent < len(pending[index]):
                    pending[index] = pending[index][sent:]
                    break
                sent -= len(pending[index])
                index += 1
            while index < len(pending):
                sent = self._sock.sendmsg(pending[index:index + _MAX_IOV])
                while index < len(pending) and sent >= len(pending[index]):
                    sent -= len(pending[index])
                    index += 1
                if sent:
                    pending[index] = pending[index][sent:]
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"sending to {self.host}:{self.port} failed: {exc}") from exc

    def receive(self) -> bytes:
        """The next response frame's body (error code first)."""
        if self._sock is None:
            raise BrokerUnavailableError(f"not connected to {self.host}:{self.port}")
        reader = self._reader
        try:
            while True:
                frame = reader.next_frame()
                if frame is not None:
                    return frame
                view = reader.receive_buffer()
                count = self._sock.recv_into(view)
                del view
                if not count:
                    raise ConnectionError("the broker closed the connection")
                reader.commit(count)
        except (OSError, ConnectionError) as exc:
            self.close()
            raise BrokerUnavailableError(f"receiving from {self.host}:{self.port} failed: {exc}") from exc

    def request(self, *buffers) -> bytes:
        self.send(*buffers)
        return self.receive()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def abort(self) -> None:
        """Shut the socket down, from any thread, without the owner's lock: a send or a
        receive blocked on it fails at once (and closes the connection). Closing is left
        to the owner."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected any more
