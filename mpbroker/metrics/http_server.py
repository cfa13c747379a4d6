"""The metrics exporter's HTTP server: a fixed number of threads, however many
connections are open.

http.server's ThreadingHTTPServer starts a thread per connection, and that thread
blocks reading the request: 2000 connections that sent nothing were 2002 threads and
52 MB more. Here one dispatcher thread accepts every connection and reads requests
without blocking (a selector); only a request whose head has fully arrived goes to
one of ``HANDLER_THREADS`` handler threads, which answer it from the bytes already
read (a scrape is a GET: no body) and send the answer within ``SEND_TIMEOUT_S``. So a
connection that sends nothing costs a file descriptor, not a thread, and a scraper is
answered while thousands of them are open. Why not waitress, which also has one
dispatcher and a fixed pool of threads: it closes only idle connections, so clients
that trickle a byte now and then hold its whole ``connection_limit`` and every scrape
waits behind them in the backlog; here a request head must arrive within a deadline,
and the oldest waiting connection makes room for a new one.

Bounds: a connection that has not sent a whole request head within
``REQUEST_TIMEOUT_S`` is closed; so is the oldest of them when ``MAX_WAITING`` are
open (a new connection is likelier to be a scraper than one that has been silent),
one whose head grows past ``MAX_HEAD_BYTES``, and one whose request finds
``QUEUED_REQUESTS`` others waiting for a handler thread.
"""

import collections
import errno
import io
import logging
import queue
import selectors
import socket
import threading
import time

from mpbroker.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

HANDLER_THREADS = 4
MAX_WAITING = 1024  # connections open without a whole request head yet
MAX_HEAD_BYTES = 16 * 1024
QUEUED_REQUESTS = 64  # whole requests waiting for a handler thread
REQUEST_TIMEOUT_S = 10.0  # to send a whole request head, from the connection's accept
SEND_TIMEOUT_S = 10.0  # to take a whole answer
ACCEPT_BACKOFF_S = 0.05  # out of file descriptors, with nothing to close
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class _Waiting:
    """A connection whose request head has not fully arrived."""

    __slots__ = ("sock", "address", "head", "deadline")

    def __init__(self, sock, address, deadline: float):
        self.sock = sock
        self.address = address
        self.head = bytearray()
        self.deadline = deadline


def _answering_from_bytes(handler_class):
    """``handler_class`` (a BaseHTTPRequestHandler) reading its request from bytes
    already received and sending its whole answer at the end, with the socket's
    timeout covering all of it."""

    class Handler(handler_class):
        def __init__(self, sock, address, head: bytes, server):
            self._head = head
            super().__init__(sock, address, server)

        def setup(self):
            self.connection = self.request
            self.rfile = io.BytesIO(self._head)
            self.wfile = io.BytesIO()

        def finish(self):
            answer = self.wfile.getvalue()
            if answer:
                self.connection.sendall(answer)

    Handler.__name__ = Handler.__qualname__ = handler_class.__name__
    return Handler


class BoundedHTTPServer:
    """Serves ``handler_class`` on ``listener`` (already listening) with
    1 + ``threads`` threads; ``start``, then ``stop``."""

    def __init__(self, listener: socket.socket, handler_class, threads: int = HANDLER_THREADS):
        self._listener = listener
        self._handler = _answering_from_bytes(handler_class)
        self._selector = selectors.DefaultSelector()
        self._waiting = collections.OrderedDict()  # socket -> _Waiting, oldest first
        self._requests = queue.Queue(QUEUED_REQUESTS)  # (socket, address, head) for the handler threads
        self._wake_read, self._wake_write = socket.socketpair()
        self._stopping = False
        self._dispatcher = threading.Thread(target=self._dispatch, name="metrics-http", daemon=True)
        self._handlers = [threading.Thread(target=self._answer_requests, name=f"metrics-http-{number}", daemon=True)
                          for number in range(threads)]
        self._accept_failures = ThrottledLog(log)  # out of descriptors: a line per 10 s, with a count

    @property
    def alive(self) -> bool:
        """False once the dispatcher thread ended (a bug): nothing would be served."""
        return self._dispatcher.is_alive()

    def start(self) -> None:
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_read, selectors.EVENT_READ, "stop")
        self._dispatcher.start()
        for thread in self._handlers:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting and reading, let the handler threads finish what they hold."""
        self._stopping = True
        self._wake_write.send(b"x")
        self._dispatcher.join(timeout)
        for _ in self._handlers:
            try:
                self._requests.put(None, timeout=timeout)
            except queue.Full:
                break
        deadline = time.monotonic() + timeout
        for thread in self._handlers:
            thread.join(max(0.0, deadline - time.monotonic()))

    # --- the dispatcher thread ----------------------------------------------------

    def _dispatch(self) -> None:
        try:
            while not self._stopping:
                timeout = None
                if self._waiting:
                    timeout = max(0.0, next(iter(self._waiting.values())).deadline - time.monotonic())
                for key, _ in self._selector.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data != "stop":
                        self._receive(key.data)
                self._expire(time.monotonic())
        finally:
            for waiting in list(self._waiting.values()):
                self._drop(waiting)
            self._selector.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self._warn_accept_failed(exc)
                if self._waiting:
                    self._drop(next(iter(self._waiting.values())))  # frees a file descriptor
                else:
                    time.sleep(ACCEPT_BACKOFF_S)  # the listener stays readable: do not spin
                return
            if len(self._waiting) >= MAX_WAITING:
                self._drop(next(iter(self._waiting.values())))
            sock.setblocking(False)
            waiting = _Waiting(sock, address, time.monotonic() + REQUEST_TIMEOUT_S)
            self._waiting[sock] = waiting
            self._selector.register(sock, selectors.EVENT_READ, waiting)

    def _receive(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client left
            self._drop(waiting)
            return
        head = waiting.head
        searched_from = max(0, len(head) - 3)
        head += data
        if any(head.find(end, searched_from) >= 0 for end in _HEAD_ENDS):
            self._hand_over(waiting)
        elif len(head) > MAX_HEAD_BYTES:
            self._drop(waiting)

    def _hand_over(self, waiting: _Waiting) -> None:
        """A whole request head arrived: to a handler thread (or closed, if too many wait)."""
        self._selector.unregister(waiting.sock)
        del self._waiting[waiting.sock]
        try:
            self._requests.put_nowait((waiting.sock, waiting.address, bytes(waiting.head)))
        except queue.Full:
            waiting.sock.close()

    def _expire(self, now: float) -> None:
        while self._waiting:
            oldest = next(iter(self._waiting.values()))
            if oldest.deadline > now:
                return
            self._drop(oldest)

    def _drop(self, waiting: _Waiting) -> None:
        self._selector.unregister(waiting.sock)
        del self._waiting[waiting.sock]
        waiting.sock.close()

    def _warn_accept_failed(self, exc: OSError) -> None:
        self._accept_failures.event("accept", logging.WARNING, f"cannot accept a metrics connection: {exc.strerror}")

    # --- the handler threads ------------------------------------------------------

    def _answer_requests(self) -> None:
        while (request := self._requests.get()) is not None:
            sock, address, head = request
            try:
                sock.setblocking(True)
                sock.settimeout(SEND_TIMEOUT_S)  # for the whole answer (sendall)
                self._handler(sock, address, head, self)
            except OSError:
                pass  # the scraper left, or did not take the answer in time
            except Exception:  # a bug: lose this request, not the thread
                log.exception("unexpected error answering a metrics request from %s", address)
            finally:
                sock.close()
