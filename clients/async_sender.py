"""The async producer's queue and background sender thread.

``send`` puts each message on a bounded queue (``queue.size``). When the queue is
full, ``queue.enqueueTimeout.ms`` decides: 0 drops the message at once, -1 waits
as long as it takes, a positive value waits that long; a message that could not be
queued is dropped, counted in ``stats.messages_dropped`` and reported to the caller
with QueueFullError (0.7's choice: the caller learns of it, nothing is lost
silently). The sender thread takes messages off the queue and delivers a batch when
it holds ``batch.size`` messages or its oldest message has waited ``queue.time`` ms.
A batch that fails after the retries is counted (``stats.messages_failed``), logged
and handed to the ``on_error`` callback. ``close`` delivers everything queued first.
"""

import logging
import queue
import threading
import time

from clients.errors import QueueFullError

log = logging.getLogger(__name__)

_CLOSE = object()


class _FlushMarker:
    def __init__(self):
        self.done = threading.Event()


class AsyncSender:
    def __init__(self, producer):
        self._producer = producer
        settings = producer.settings
        self._queue = queue.Queue(maxsize=settings.queue_size)
        self._batch_size = settings.batch_size
        self._queue_time = settings.queue_time / 1000
        timeout_ms = settings.queue_enqueue_timeout_ms
        self._enqueue_block = timeout_ms != 0
        self._enqueue_timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self._thread = threading.Thread(target=self._run, name="mpbroker-producer-sender", daemon=True)
        self._thread.start()

    def enqueue(self, item) -> None:
        try:
            self._queue.put(item, self._enqueue_block, self._enqueue_timeout)
        except queue.Full:
            self._producer.stats.add(messages_dropped=1)
            raise QueueFullError(
                f"the producer queue is full ({self._queue.maxsize} messages); the message was dropped") from None

    def flush(self, timeout: float | None = None) -> bool:
        """True once everything queued before the call was handled; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        marker = _FlushMarker()
        try:
            self._queue.put(marker, True, timeout)
        except queue.Full:
            return False
        return marker.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float | None = None) -> bool:
        """Deliver what is queued and stop the thread; False if that took over ``timeout``
        seconds (the thread then goes on in the background, messages still queued)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._queue.put(_CLOSE, True, timeout)
        except queue.Full:
            log.warning("close: the producer queue is still full after %.1fs; %d messages undelivered",
                        timeout, self._queue.qsize())
            return False
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _run(self) -> None:
        batch = []
        deadline = 0.0
        get = self._queue.get
        while True:
            try:
                item = get(timeout=max(0.0, deadline - time.monotonic())) if batch else get()
            except queue.Empty:
                batch = self._deliver(batch)
                continue
            if item is _CLOSE:
                self._deliver(batch)
                return
            if isinstance(item, _FlushMarker):
                batch = self._deliver(batch)
                item.done.set()
                continue
            if not batch:
                deadline = time.monotonic() + self._queue_time
            batch.append(item)
            if len(batch) >= self._batch_size:
                batch = self._deliver(batch)

    def _deliver(self, batch) -> list:
        if batch:
            try:
                self._producer.deliver(batch)
            except Exception as exc:  # counted and reported by deliver(); the thread goes on
                log.error("could not deliver a batch of %d messages: %s", len(batch), exc)
        return []
