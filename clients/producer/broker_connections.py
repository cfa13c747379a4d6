"""The producer's connection to each broker and, for sync fire-and-forget, each
broker's write-behind queue (``mpbroker.clients.core.write_behind``).

A broker's connection is made when it is first used, and made again when the broker
is registered at another address (``zk.connect``) or after it was dropped (``forget``:
a leader that died or moved). Each comes with the lock its users hold while they
write and read it. A write-behind queue belongs to one connection: a queue whose
connection was replaced is closed (its requests written first) and a new one made.
What a queue could not write is counted as failed and raised by the producer's next
``send`` or ``flush`` (``raise_write_failure``), or logged at ``close``.

Apart from the delivery (``delivery``) so that the connections' lifetime (made, replaced,
dropped, closed, started afresh in a forked child) is in one place.
"""

import logging
import threading
import time

from mpbroker.clients.core.connection import BrokerConnection
from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.core.write_behind import WriteBehind

log = logging.getLogger("mpbroker.clients.producer.producer")  # the producer's log, as before the split


class BrokerConnections:
    """``metadata``: the producer's broker discovery (``brokers``, ``invalidate_all``),
    set by the producer once made (a static broker list probes through these
    connections, so it is made after them)."""

    def __init__(self, settings, stats):
        self.settings = settings
        self.stats = stats
        self.metadata = None
        self.connections = {}  # broker id -> (lock, BrokerConnection), made on first use
        self.writers = {}  # broker id -> WriteBehind: sync fire-and-forget requests (write_behind)
        self._lock = threading.Lock()

    def connection_for(self, broker_id: int, broker=None) -> tuple:
        """(lock, BrokerConnection) of a broker (``broker``: its address, else the one
        discovery knows), made on first use; a broker that is registered again at another
        address (zk.connect) gets a new connection."""
        broker = broker or self.metadata.brokers.get(broker_id)
        entry = self.connections.get(broker_id)
        if entry is not None and (broker is None or (entry[1].host == broker.host and entry[1].port == broker.port)):
            return entry
        if broker is None:
            raise BrokerUnavailableError(f"broker {broker_id} is not registered any more")
        with self._lock:
            old = self.connections.get(broker_id)
            if old is not None and (old[1].host, old[1].port) == (broker.host, broker.port):
                return old
            settings = self.settings
            entry = self.connections[broker_id] = (threading.Lock(), BrokerConnection(
                broker.host, broker.port, connect_timeout_ms=settings.connect_timeout_ms,
                socket_timeout_ms=settings.socket_timeout_ms, backoff_ms=settings.retry_backoff_ms))
        if old is not None:
            with old[0]:
                old[1].close()
        return entry

    def forget(self, broker_id: int) -> None:
        """Drop a broker's connection (made again on its next use), and its write-behind
        queue once that is written."""
        self.retire_writer(broker_id)
        with self._lock:
            entry = self.connections.pop(broker_id, None)
        if entry is not None:
            with entry[0]:
                entry[1].close()

    # --- the write-behind queues (sync fire-and-forget) --------------------------

    def write_behind_queue(self, broker_id: int, lock, connection):
        """The broker's write-behind queue on ``connection`` (its ``lock``), made on first
        use. None while the connection is down and nothing is queued: the caller then
        writes itself, so that a broker it cannot reach fails that send at once. Raises,
        first, the failure of earlier queued requests."""
        writer = self.writers.get(broker_id)
        if writer is not None and writer.connection is not connection:  # the broker moved
            self.retire_writer(broker_id)
            writer = None
        if writer is not None and writer.failed:
            self.raise_write_failure(broker_id, writer, "; the messages of this call were not sent")
        if not connection.connected and (writer is None or not writer.busy):
            return None
        if writer is None:
            writer = self.writers[broker_id] = WriteBehind(lock, connection, self.settings.num_retries,
                                                           self.settings.retry_backoff_ms / 1000)
        return writer

    def raise_write_failure(self, broker_id: int, writer, what_else: str) -> None:
        """Raise BrokerUnavailableError for the messages ``writer`` could not write, if
        any (counted as failed here; the broker's partitions are probed again)."""
        failed, failure = writer.take_failure()
        if not failed:
            return
        self.stats.messages_failed += failed
        self.metadata.invalidate_all()
        raise BrokerUnavailableError(f"{failed} fire-and-forget message(s) sent earlier to broker {broker_id} "
                                     f"could not be written ({failure}){what_else}") from failure

    def flush_writers(self, timeout: float | None) -> bool:
        """Wait until every queue wrote what it holds; False if ``timeout`` seconds passed
        first. Then raises BrokerUnavailableError for messages that could not be written."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = True
        writers = list(self.writers.items())
        for _, writer in writers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = writer.flush(left) and done
        for broker_id, writer in writers:  # once every queue was waited for
            self.raise_write_failure(broker_id, writer, "")
        return done

    def retire_writer(self, broker_id: int) -> None:
        """Close the broker's write-behind queue (its requests written first, up to
        ``socket.timeout.ms``); what it could not write is counted as failed and logged."""
        writer = self.writers.pop(broker_id, None)
        if writer is None:
            return
        writer.close(self.settings.socket_timeout_ms / 1000)
        self._log_failure(broker_id, writer)

    def close_writers(self, timeout: float | None) -> bool:
        """Write what the write-behind queues hold and end their threads; False if some of
        it was not written (logged and counted as failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        written = True
        for broker_id, writer in list(self.writers.items()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not writer.close(left):
                written = False
            self._log_failure(broker_id, writer)
        self.writers.clear()
        return written

    def _log_failure(self, broker_id: int, writer) -> None:
        failed, failure = writer.take_failure()
        if failed:
            self.stats.messages_failed += failed
            log.error("%d fire-and-forget message(s) to broker %d could not be written: %s",
                      failed, broker_id, failure)

    # --- the end --------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection (the write-behind queues first: ``close_writers``)."""
        for lock, connection in list(self.connections.values()):
            with lock:
                connection.close()

    def after_fork_in_child(self) -> None:
        """In a child process after ``fork``: the connections are the parent's (two
        processes writing one socket would mix their requests), the writer threads and
        their queues too, and any lock may have been held at the fork. Start afresh:
        new locks, every connection closed here (made again on first use), the
        write-behind queues empty."""
        self._lock = threading.Lock()
        for broker_id, (_, connection) in list(self.connections.items()):
            connection.close()  # this process's descriptor only: the parent's socket stays open
            lock = threading.Lock()
            self.connections[broker_id] = (lock, connection)
            writer = self.writers.get(broker_id)
            if writer is not None:
                writer.reset_after_fork(lock)
