"""Flushes off the worker's main thread.

``fdatasync`` can take tens of milliseconds; a few background threads run it while the
worker goes on appending. The main thread begins a flush (``Log.begin_flush``) and
finishes it (``Log.finish_flush``) itself, so a Log is only ever changed by one
thread. Each log has at most one flush in flight; a request that arrives meanwhile is
remembered and issued when the first completes, so a busy log gets back-to-back
flushes that each cover everything appended so far (group commit).
"""

import logging
import os
import queue
import select
import threading
import time

from mpbroker.ipc.counters import record_flush
from mpbroker.segments.log import sync_pending

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, counters, threads: int = 2):
        self.counters = counters  # the worker's CounterTable row: flushes and their latency
        self.done_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._work = queue.SimpleQueue()
        self._finished = queue.SimpleQueue()
        self._in_flight = {}  # Log -> PendingFlush
        self._again = set()  # logs asked to flush again while one was in flight
        self._threads = [threading.Thread(target=self._run, name=f"flusher-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def request(self, partition_log) -> None:
        """Flush ``partition_log`` as soon as possible (no-op if there is nothing to flush)."""
        if partition_log in self._in_flight:
            self._again.add(partition_log)
            return
        if not partition_log.needs_flush:
            return
        pending = partition_log.begin_flush()
        self._in_flight[partition_log] = pending
        self._work.put((partition_log, pending))

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            partition_log, pending = item
            error = None
            started = time.monotonic()
            try:
                sync_pending(pending)
            except OSError as exc:
                error = exc
            self._finished.put((partition_log, pending, error, time.monotonic() - started))
            os.eventfd_write(self.done_fd, 1)

    def collect(self) -> list:
        """Finish completed flushes on the owner's thread; return ``[(log, error)]``."""
        try:
            os.eventfd_read(self.done_fd)
        except BlockingIOError:
            pass
        results = []
        while True:
            try:
                partition_log, pending, error, seconds = self._finished.get_nowait()
            except queue.Empty:
                break
            record_flush(self.counters, seconds, error is not None)  # here: one writer, the main thread
            del self._in_flight[partition_log]
            try:
                partition_log.finish_flush(pending, error)
            except Exception as exc:  # StorageError: the caller decides what a failed flush means
                results.append((partition_log, exc))
                continue
            results.append((partition_log, None))
            if partition_log in self._again:
                self._again.discard(partition_log)
                self.request(partition_log)
        return results

    def wait_idle(self) -> list:
        """Block until no flush is in flight; return what ``collect`` gathered meanwhile."""
        results = []
        while self._in_flight:
            select.select([self.done_fd], [], [], 1.0)
            results.extend(self.collect())
        return results

    def stop(self) -> None:
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout=60)
