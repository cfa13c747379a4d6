"""Flushes off the worker's main thread.

``fdatasync`` can take tens of milliseconds; a few background threads run it while the
worker goes on appending. The main thread begins a flush (``Log.begin_flush``) and
finishes it (``Log.finish_flush``) itself, so a Log is only ever changed by one
thread. Each log has at most one flush in flight; a request that arrives meanwhile is
remembered and issued when the first completes, so a busy log gets back-to-back
flushes that each cover everything appended so far (group commit).

The same threads write the worker's recovery-point checkpoint (two more fsyncs), one
write at a time, so the main thread never waits for the disk.
"""

import logging
import os
import queue
import select
import threading
import time

from mpbroker.codec.errors import StorageError
from mpbroker.ipc.counters import record_flush
from mpbroker.segments.flushing import sync_pending
from mpbroker.segments.recovery_points import write_checkpoint

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, counters, threads: int = 2):
        self.counters = counters  # the worker's CounterTable row: flushes and their latency
        self.done_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._work = queue.SimpleQueue()
        self._finished = queue.SimpleQueue()
        self._in_flight = {}  # Log -> PendingFlush
        self._again = set()  # logs asked to flush again while one was in flight
        self.checkpoint_in_flight = None  # the points being written, while a checkpoint write runs
        self.checkpoint_result = None  # (points, error) of the last finished checkpoint write, until taken
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

    def write_checkpoint(self, path: str, points: dict) -> None:
        """Write the recovery-point checkpoint in the background (not while another runs)."""
        if self.checkpoint_in_flight is not None:
            raise RuntimeError("a checkpoint write is already in flight")
        self.checkpoint_in_flight = points
        self._work.put((None, (path, points)))

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            partition_log, job = item
            error = None
            started = time.monotonic()
            try:
                if partition_log is None:
                    write_checkpoint(*job)
                else:
                    sync_pending(job)
            except (OSError, StorageError) as exc:
                error = exc
            self._finished.put((partition_log, job, error, time.monotonic() - started))
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
            if partition_log is None:  # a checkpoint write
                self.checkpoint_result = (self.checkpoint_in_flight, error)
                self.checkpoint_in_flight = None
                continue
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
        """Block until no flush (nor checkpoint write) is in flight; return what
        ``collect`` gathered meanwhile."""
        results = []
        while self._in_flight or self.checkpoint_in_flight is not None:
            select.select([self.done_fd], [], [], 1.0)
            results.extend(self.collect())
        return results

    def wait_for(self, partition_logs, checkpoint: bool = False) -> list:
        """Block until none of ``partition_logs`` has a flush in flight (nor, with
        ``checkpoint``, a checkpoint write runs), and forget their flushes asked for
        meanwhile; return what ``collect`` gathered (a log about to be deleted)."""
        results = []
        self._again.difference_update(partition_logs)
        while (any(partition_log in self._in_flight for partition_log in partition_logs)
               or (checkpoint and self.checkpoint_in_flight is not None)):
            select.select([self.done_fd], [], [], 1.0)
            results.extend(self.collect())
        for partition_log in partition_logs:
            self._again.discard(partition_log)
        return results

    def stop(self) -> None:
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout=60)
