"""Fire-and-forget requests to one broker, written behind their caller.

A sync producer with ``acks=none`` used to write each request itself: one system call
per ``send()``, which on this kind of machine costs more than the Python that makes a
one-message request (the paper's batch 1), so the producer spent most of its time in
the kernel. Here ``submit`` queues a request's buffers and returns, and one thread per
connection writes everything queued since its last write in one write: requests
issued while a write is under way share the next one. Each request stays its own
request on the wire, in the order submitted.

What a caller can count on:

- **Order**: requests reach the socket in the order ``submit`` was called.
- **flush()**: returns once everything submitted before it was handed to the socket
  (as a sync send did on return).
- **Failure**: a write that fails is tried again on a new connection
  (``retries`` times, ``backoff_s`` apart; a resend may duplicate, as any
  fire-and-forget resend may). What still could not be written is counted until the
  owner takes it (``take_failure``: the producer raises it from its next call).
- **Bounded**: at most ``max_queued_bytes`` wait; ``submit`` blocks for room.
- **Exit**: a queue its owner did not close is still written when the interpreter
  exits (``atexit``, up to ``EXIT_FLUSH_S``): the thread is a daemon, so that a
  forgotten producer does not keep the program alive.

What it gives up: between ``submit`` returning and the write (microseconds when the
writer is idle; up to Python's thread switch interval under a tight loop), the
request is in this process only, so a process killed then loses it where a write in
the caller would have left it in the kernel. Callers that need more call ``flush()``,
or use an acknowledged mode.

Written by hand: the standard library's queues hand over one item at a time, and the
point here is to hand over everything queued at once.
"""

import atexit
import logging
import threading
import time
import weakref

from mpbroker.clients.core.errors import BrokerUnavailableError

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED_BYTES = 8 << 20
EXIT_FLUSH_S = 10.0
IDLE_EXIT_S = 1.0  # a thread with nothing to write for this long ends (a producer dropped unclosed is collected)
ABORT_JOIN_S = 5.0  # close(): how long to wait for the thread once its write was cut short

_open_writers = weakref.WeakSet()


@atexit.register
def _write_open_queues() -> None:
    """At exit (daemon threads still run then): write what open queues hold."""
    deadline = time.monotonic() + EXIT_FLUSH_S
    for writer in list(_open_writers):
        writer.flush(max(0.0, deadline - time.monotonic()))


class WriteBehind:
    """The write-behind queue and thread of one ``BrokerConnection``. ``lock`` is the
    connection's lock, held for each write (other requests share the connection)."""

    def __init__(self, lock, connection, retries: int, backoff_s: float,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES):
        self.lock = lock
        self.connection = connection
        self._retries = retries
        self._backoff_s = backoff_s
        self._max_queued_bytes = max_queued_bytes
        self._state_lock = threading.Lock()  # not re-entered: a plain lock is cheaper
        self._state = threading.Condition(self._state_lock)  # held as ``_state_lock`` by ``submit``
        self._queue = []  # buffers, in submission order
        self._queued_bytes = 0
        self._queued_messages = 0
        self._busy = False  # something is queued or being written
        self._closed = False
        self._failed = 0  # messages not written, not yet reported
        self._failure = None  # the error that made them fail
        self._thread = None
        self.writes = 0  # the number of writes (each holds one or more requests)
        _open_writers.add(self)

    @property
    def failed(self) -> int:
        """Messages not written and not taken yet (``take_failure``)."""
        return self._failed

    @property
    def busy(self) -> bool:
        """Something is queued or being written."""
        return self._busy

    def submit(self, buffers, messages: int, size: int | None = None) -> None:
        """Queue one or more requests' buffers (``messages`` messages in all; ``size``:
        their bytes, when the caller knows them)."""
        if size is None:
            size = sum(map(len, buffers))
        with self._state_lock:  # the condition's lock, taken without its Python-level wrapper
            while True:
                if self._closed:  # also while waiting for room
                    raise BrokerUnavailableError(f"the writer of {self.connection} is closed")
                if not self._queued_bytes or self._queued_bytes + size <= self._max_queued_bytes:
                    break
                self._state.wait()
            self._queue.extend(buffers)
            self._queued_bytes += size
            self._queued_messages += messages
            if not self._busy:
                self._busy = True
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"write-behind {self.connection}",
                                                    daemon=True)
                    self._thread.start()
                self._state.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted was written or failed; False if ``timeout``
        seconds passed first."""
        with self._state:
            return self._state.wait_for(lambda: not self._busy, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued (up to ``timeout`` seconds), then end the thread. What is
        still queued then is dropped and counted as failed, and a write under way is cut
        short (the socket is shut down): nothing is written, and no connection made,
        after this returns. False if the queue was not written in time or some of it
        failed (``take_failure``)."""
        with self._state:
            done = self._state.wait_for(lambda: not self._busy, timeout)
            self._closed = True
            if self._queue:
                self._fail(self._queued_messages, BrokerUnavailableError(
                    f"the producer closed before these were written to {self.connection}"))
                self._queue, self._queued_bytes, self._queued_messages = [], 0, 0
            thread = self._thread
            self._state.notify_all()
        if not done:
            self.connection.abort()  # a write blocked on a peer that does not read ends now
        if thread is not None and thread is not threading.current_thread():
            thread.join(ABORT_JOIN_S)
        _open_writers.discard(self)
        return done and not self._failed

    def take_failure(self):
        """``(messages, error)`` not written and not reported yet, and forget them;
        ``(0, None)`` if none."""
        with self._state:
            failed, failure = self._failed, self._failure
            self._failed, self._failure = 0, None
            return failed, failure

    def reset_after_fork(self, lock) -> None:
        """In a child process after ``fork``: the parent's thread is not here and its
        queue is the parent's to write. Start afresh (on ``lock``, the connection's lock
        made anew: the parent's may have been held at the fork)."""
        self.lock = lock
        self._state_lock = threading.Lock()
        self._state = threading.Condition(self._state_lock)
        self._queue, self._queued_bytes, self._queued_messages = [], 0, 0
        self._busy = False
        self._thread = None

    def _fail(self, messages: int, error: Exception) -> None:
        self._failed += messages
        self._failure = error

    def _run(self) -> None:
        state = self._state
        while True:
            with state:
                while not self._queue:
                    self._busy = False
                    state.notify_all()  # flush() waits for this
                    if self._closed or not state.wait(IDLE_EXIT_S) and not self._queue:
                        self._thread = None  # idle (or closed): a later submit starts another
                        return
                buffers, messages = self._queue, self._queued_messages
                self._queue, self._queued_bytes, self._queued_messages = [], 0, 0
                state.notify_all()  # room for submit()
            error = self._write(b"".join(buffers))
            if error is not None:
                with state:
                    self._fail(messages, error)

    def _write(self, data: bytes):
        """Write ``data``, trying again on a new connection unless closed meanwhile;
        None, or the last error."""
        error = None
        for attempt in range(self._retries + 1):
            if attempt:
                time.sleep(self._backoff_s)
            if self._closed and (attempt or not self.connection.connected):
                break  # closed: no new connection, and no second try
            try:
                with self.lock:
                    self.connection.send(data)
            except BrokerUnavailableError as exc:
                error = exc
                continue
            except Exception as exc:  # a bug, or an error the connection did not wrap: fail these, go on
                log.exception("writing to %s failed", self.connection)
                error = BrokerUnavailableError(f"writing to {self.connection} failed: {exc!r}")
                continue
            self.writes += 1
            return None
        return error or BrokerUnavailableError(f"the producer closed before this was written to {self.connection}")
