"""The async producer's queue and background sender thread.

``send`` appends each message to a bounded queue (about ``queue.size`` messages; a
few more if several threads race at the limit). The queue is a deque: appending
takes no lock, and the sender thread is only woken when a batch starts (to start its
``queue.time`` clock) or fills up (``batch.size``), so a message costs the caller a
fraction of a microsecond instead of a lock hand-off. When the queue is full,
``queue.enqueueTimeout.ms`` decides: 0 drops the message at once, -1 waits as long
as it takes, a positive value waits that long; a message that could not be queued
is dropped, counted in ``stats.messages_dropped`` and reported to the caller with
QueueFullError (0.7's choice: the caller learns of it, nothing is lost silently).

The sender thread delivers a batch when it holds ``batch.size`` messages or its
oldest message has waited ``queue.time`` ms. A batch that fails after the retries is
counted (``stats.messages_failed``), logged and handed to ``on_error``. ``flush``
waits until everything queued before it was handled; ``close`` delivers everything
queued, then stops the thread.
"""

import collections
import logging
import threading
import time

from mpbroker.clients.core.errors import QueueFullError

log = logging.getLogger(__name__)


class _FlushMarker:
    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()


class AsyncSender:
    def __init__(self, producer):
        self._producer = producer
        settings = producer.settings
        self._items = collections.deque()
        self._capacity = settings.queue_size
        self._batch_size = settings.batch_size
        self._queue_time = settings.queue_time / 1000
        timeout_ms = settings.queue_enqueue_timeout_ms
        self._enqueue_timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits on it
        self._room = threading.Condition(self._lock)  # callers wait on it when the queue is full
        self._closing = False
        self._pending_flushes = 0  # flush markers in the queue: deliver without waiting for a full batch
        self._thread = threading.Thread(target=self._run, name="mpbroker-producer-sender", daemon=True)
        self._thread.start()

    # --- callers ----------------------------------------------------------------

    def enqueue(self, item) -> None:
        items = self._items
        if len(items) >= self._capacity and not self._wait_for_room():
            self._producer.stats.messages_dropped += 1
            raise QueueFullError(
                f"the producer queue is full ({self._capacity} messages); the message was dropped")
        items.append(item)
        queued = len(items)
        if queued == 1 or queued == self._batch_size:
            with self._lock:
                self._wake.notify()

    def _wait_for_room(self) -> bool:
        if self._enqueue_timeout == 0:
            return False
        deadline = None if self._enqueue_timeout is None else time.monotonic() + self._enqueue_timeout
        with self._lock:
            while len(self._items) >= self._capacity:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._room.wait(remaining)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """True once everything queued before the call was handled; False on timeout."""
        marker = _FlushMarker()
        with self._lock:
            self._items.append(marker)
            self._pending_flushes += 1
            self._wake.notify()
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Deliver what is queued and stop the thread; False if that took over ``timeout``
        seconds (the thread then goes on in the background)."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("close: %d messages still undelivered after %ss", len(self._items), timeout)
            return False
        return True

    # --- the sender thread --------------------------------------------------------

    def _run(self) -> None:
        items = self._items
        while True:
            with self._lock:
                while not items and not self._closing:
                    self._wake.wait()
                if not items:
                    return  # closing, and nothing left
                # A batch has started: wait until it is full, queue.time passed, or we must hurry.
                deadline = time.monotonic() + self._queue_time
                while len(items) < self._batch_size and not self._closing and not self._pending_flushes:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
            self._send_batch()

    def _send_batch(self) -> None:
        """Deliver up to ``batch.size`` messages from the front (up to a flush marker)."""
        items = self._items
        batch = []
        marker = None
        while items and len(batch) < self._batch_size:
            item = items.popleft()
            if isinstance(item, _FlushMarker):
                marker = item
                break
            batch.append(item)
        with self._lock:
            if marker is not None:
                self._pending_flushes -= 1
            self._room.notify_all()
        if batch:
            try:
                self._producer.deliver(batch)
            except Exception as exc:  # counted and reported by deliver(); the thread goes on
                log.error("could not deliver a batch of %d messages: %s", len(batch), exc)
        if marker is not None:
            marker.done.set()
