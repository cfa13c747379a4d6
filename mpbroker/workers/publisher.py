"""Keeps a worker's entries in the shared partition table in step with its logs.

The acceptor serves fetches from what is published here (flushed end, log start,
segment list version; for a replicated partition its role, leader epoch and high
watermark), so a log's entry is rewritten after every change a reader cares about:
appends (log end, counters), flushes (flushed end, recovery point), rolls and
retention (segments), role changes and high watermarks (``replication``). The
recovery point published here is where a respawned worker starts recovering the log.
A deleted log's entry says so (``Role.DELETED``, its generation one more); a log made
anew under the same name takes the entry over in that generation.
"""

from mpbroker.ipc.partition_table import PartitionState, PartitionTable, Role, isr_slots
from mpbroker.segments.recovery_points import stored

_UNREPLICATED = (Role.UNREPLICATED, -1, -1, 0, 0, 0, isr_slots(()))


class Publisher:
    def __init__(self, table: PartitionTable):
        self._table = table
        self._index = {}  # Log -> table index
        self._counters = {}  # Log -> [messages_in, bytes_in, last_flush_ms]
        self._version_base = {}  # Log -> added to its segments_version (monotonic across restarts)
        self.replicas = {}  # Log -> replication.Replica, for the replicated partitions
        self._previous = {}  # Log -> the state its entry held when added (a predecessor's, after a respawn)
        self._generation = {}  # Log -> its entry's generation

    def __len__(self) -> int:
        return len(self._index)

    def add(self, partition_log) -> None:
        index = self._table.find_or_add(partition_log.topic, partition_log.partition)
        self._index[partition_log] = index
        # Counters and versions go on across worker restarts. The entry is this slot's
        # alone: a predecessor killed mid-update left it torn, and we rewrite it.
        previous = self._table.take_over(index)
        self._previous[partition_log] = previous
        self._counters[partition_log] = [previous.messages_in, previous.bytes_in, previous.last_flush_ms]
        self._version_base[partition_log] = previous.segments_version + 1
        self._generation[partition_log] = previous.generation
        self.publish(partition_log)

    def previous(self, partition_log):
        """The PartitionState the log's entry held when it was added (None: new entry)."""
        return self._previous.get(partition_log)

    def count(self, partition_log, messages: int, nbytes: int) -> None:
        counters = self._counters[partition_log]
        counters[0] += messages
        counters[1] += nbytes

    def flushed(self, partition_log, now_ms: int) -> None:
        self._counters[partition_log][2] = now_ms
        self.publish(partition_log)

    def publish(self, partition_log) -> None:
        messages_in, bytes_in, last_flush_ms = self._counters[partition_log]
        replica = self.replicas.get(partition_log)
        replication = _UNREPLICATED if replica is None else replica.table_fields()
        self._table.write(self._index[partition_log], PartitionState(
            partition_log.log_start,
            partition_log.flushed_end,
            partition_log.log_end,
            self._version_base[partition_log] + partition_log.segments_version,
            messages_in,
            bytes_in,
            last_flush_ms,
            stored(partition_log.recovery_point),
            partition_log.segment_count,
            partition_log.partition,
            *replication,
            self._generation[partition_log],
        ))

    def remove(self, partition_log) -> None:
        """The log was deleted: its entry says so, in a new generation, and the
        publisher forgets it."""
        index = self._index.pop(partition_log)
        messages_in, bytes_in, last_flush_ms = self._counters.pop(partition_log)
        version = self._version_base.pop(partition_log) + partition_log.segments_version + 1
        self._table.write(index, PartitionState(
            0, 0, 0, version, messages_in, bytes_in, last_flush_ms, -1, 0, partition_log.partition,
            Role.DELETED, -1, -1, 0, 0, 0, isr_slots(()), self._generation.pop(partition_log) + 1))
        self._previous.pop(partition_log, None)
        self.replicas.pop(partition_log, None)

    def publish_all(self) -> None:
        for partition_log in self._index:
            self.publish(partition_log)
