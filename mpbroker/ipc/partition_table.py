"""Published partition states: how a worker tells other processes about its logs.

One table per worker slot in anonymous shared memory. The owning worker is the only
writer; the acceptor (fetch, OFFSETS) and the supervisor (status) read it. An entry
is added once per partition and keeps its index for the life of the broker, also
across worker restarts (a respawned worker finds its old entries by name), so
readers may cache ``(topic, partition) -> index``.

Each entry is guarded by a sequence lock: the writer makes ``seq`` odd, stores the
fields, makes it even again; a reader retries until it reads the same even ``seq``
before and after the fields (x86-64 store and load ordering makes this sound). The
``seq`` and the entry count are loaded and stored as whole aligned 8-byte words
through a typed memoryview: ``struct.pack_into`` would zero-fill the bytes first and
let a reader see a torn, even ``seq``.

A writer killed between the two ``seq`` stores leaves its entries odd. Readers then
wait (``read`` raises TornEntryError after its patience) until the slot's next
writer, the respawned worker, takes its entries over (``take_over``): it reads the
fields as they are stored, without waiting for an even ``seq`` that no live process
will ever write, and its next ``write`` makes the entry consistent again. Every field
is an aligned 8-byte word (or the partition, which never changes), so each holds a
value the dead writer stored, the old one or the new one.
"""

import mmap
import os
import struct
import time
from typing import NamedTuple

_HEADER_BYTES = 64
ENTRY_BYTES = 512  # a multiple of 8: every entry's seq word is aligned
# log_start, flushed_end, log_end, segments_version, messages_in, bytes_in, last_flush_ms,
# recovery_point, segment_count, partition
_FIELDS = struct.Struct("<qqqQQQqqIi")
_FIELDS_AT = 8
# Replication: role, leader, leader_epoch, epoch_start, high_watermark, replica count,
# then the ISR's broker ids (-1 for an unused place); then the entry's generation.
MAX_ISR = 8
_REPLICA_FIELDS = struct.Struct(f"<qqqqqq{MAX_ISR}iq")
_REPLICA_AT = _FIELDS_AT + _FIELDS.size
_NO_ISR = (-1,) * MAX_ISR
_NAME_AT = _REPLICA_AT + _REPLICA_FIELDS.size
_NAME_LENGTH = struct.Struct("<H")
MAX_TOPIC_BYTES = 255


class Role:
    """What this broker is for a partition (``PartitionState.role``)."""

    UNREPLICATED = 0  # a 0.7 partition: readers see the flushed end
    LEADER = 1  # readers see the high watermark
    FOLLOWER = 2  # copies its leader; clients are told "not leader"
    OFFLINE = 3  # a replica here, but neither leading nor following now (no leader, or no ZooKeeper lease)
    DELETED = 4  # its topic was deleted: no log here (until a produce makes one anew, a new generation)

    NAMES = {UNREPLICATED: "unreplicated", LEADER: "leader", FOLLOWER: "follower", OFFLINE: "offline",
             DELETED: "deleted"}


class PartitionState(NamedTuple):
    log_start: int
    flushed_end: int  # what readers of an unreplicated partition may see
    log_end: int
    segments_version: int
    messages_in: int  # messages appended since the broker started (all worker lives)
    bytes_in: int
    last_flush_ms: int
    recovery_point: int  # everything before it is on disk (fsync'ed); -1: not known yet
    segment_count: int
    partition: int
    role: int = Role.UNREPLICATED
    leader: int = -1  # broker id
    leader_epoch: int = -1
    epoch_start: int = 0  # where the current leader epoch began in this log
    high_watermark: int = 0  # what readers of a replicated partition may see
    replica_count: int = 0  # replicas the assignment gives the partition (0: unreplicated)
    isr_slots: tuple = _NO_ISR  # the in-sync replicas' ids, -1 for unused places
    # How many times the entry's log was deleted: a reader that cached a log's files and
    # format under another generation drops them (the log was deleted and made anew).
    generation: int = 0

    @property
    def isr(self) -> tuple:
        return tuple(broker for broker in self.isr_slots if broker >= 0)

    @property
    def under_replicated(self) -> bool:
        """Led here, with an ISR smaller than its replicas (Kafka's UnderReplicatedPartitions)."""
        return self.role == Role.LEADER and len(self.isr) < self.replica_count

    @property
    def visible_end(self) -> int:
        """Where a consumer's read stops: the high watermark of a replicated partition,
        the flushed end of another."""
        return self.flushed_end if self.role == Role.UNREPLICATED else self.high_watermark


def isr_slots(isr) -> tuple:
    """``isr`` padded to the table's places (the first MAX_ISR members)."""
    isr = tuple(isr)[:MAX_ISR]
    return isr + _NO_ISR[len(isr):]


class TableFullError(Exception):
    pass


class TornEntryError(Exception):
    """An entry stayed mid-update for too long: its writer died while storing it."""


_BUSY_SPINS = 64  # attempts per burst; between bursts sleep in growing steps (a preempted writer runs)
_FIRST_SLEEP_S = 0.00005
_MAX_SLEEP_S = 0.005
DEFAULT_PATIENCE_S = 0.5  # far beyond any scheduler time slice: only a dead writer takes longer


class PartitionTable:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._mm = mmap.mmap(-1, _HEADER_BYTES + capacity * ENTRY_BYTES, flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._words = memoryview(self._mm).cast("Q")  # aligned 8-byte loads and stores
        self._writer_index = None  # (topic, partition) -> index, built by the writer process
        self._writer_pid = 0

    def __len__(self) -> int:
        return self._words[0]

    @staticmethod
    def _at(index: int) -> int:
        return _HEADER_BYTES + index * ENTRY_BYTES

    # --- reader ---------------------------------------------------------------

    def name(self, index: int) -> tuple:
        """``(topic, partition)`` of an entry (neither changes once the entry is added)."""
        at = self._at(index)
        (length,) = _NAME_LENGTH.unpack_from(self._mm, at + _NAME_AT)
        start = at + _NAME_AT + _NAME_LENGTH.size
        topic = self._mm[start:start + length].decode("ascii")
        # The partition field is written before the entry is published and never again
        # changes, so it can be read without the sequence lock.
        partition = _FIELDS.unpack_from(self._mm, at + _FIELDS_AT)[-1]
        return topic, partition

    def names(self, start: int = 0) -> list:
        """``[(index, topic, partition), ...]`` for entries from ``start`` on."""
        return [(index, *self.name(index)) for index in range(start, len(self))]

    def read(self, index: int, patience: float = DEFAULT_PATIENCE_S) -> PartitionState:
        """The entry's state, consistent. A writer preempted mid-update gets the CPU
        back while we sleep in short, growing steps; if the entry stays mid-update for
        ``patience`` seconds its writer died while storing it, and TornEntryError is
        raised (until a new writer rewrites the entry)."""
        at = self._at(index)
        word = at >> 3
        words = self._words
        mm = self._mm
        spins = 0
        deadline = None
        pause = _FIRST_SLEEP_S
        while True:
            before = words[word]
            if not before & 1:
                fields = _FIELDS.unpack_from(mm, at + _FIELDS_AT)
                replica = _REPLICA_FIELDS.unpack_from(mm, at + _REPLICA_AT)
                if words[word] == before:
                    return PartitionState(*fields, *replica[:6], replica[6:-1], replica[-1])
            spins += 1
            if spins > _BUSY_SPINS:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + patience
                elif now > deadline:
                    raise TornEntryError(f"partition table entry {index} stayed mid-update for {patience}s")
                time.sleep(pause)
                pause = min(_MAX_SLEEP_S, pause * 2)
                spins = 0  # a fresh burst of attempts after each sleep

    # --- writer (the owning worker) --------------------------------------------

    def find_or_add(self, topic: str, partition: int) -> int:
        """The entry of ``topic``/``partition``, added (empty) if it has none yet."""
        if self._writer_index is None or self._writer_pid != os.getpid():
            self._writer_index = {(name, number): index for index, name, number in self.names()}
            self._writer_pid = os.getpid()
        found = self._writer_index.get((topic, partition))
        if found is not None:
            return found
        count = len(self)
        if count >= self.capacity:
            raise TableFullError(f"partition table is full ({self.capacity} partitions per worker)")
        raw = topic.encode("ascii")
        if len(raw) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic name of {len(raw)} bytes is too long")
        at = self._at(count)
        self._words[at >> 3] = 0
        _FIELDS.pack_into(self._mm, at + _FIELDS_AT, 0, 0, 0, 0, 0, 0, 0, -1, 0, partition)
        _REPLICA_FIELDS.pack_into(self._mm, at + _REPLICA_AT, Role.UNREPLICATED, -1, -1, 0, 0, 0, *_NO_ISR, 0)
        _NAME_LENGTH.pack_into(self._mm, at + _NAME_AT, len(raw))
        start = at + _NAME_AT + _NAME_LENGTH.size
        self._mm[start:start + len(raw)] = raw
        self._words[0] = count + 1  # publish the entry last
        self._writer_index[(topic, partition)] = count
        return count

    def take_over(self, index: int) -> PartitionState:
        """The state a new writer of this slot finds in its entry: the fields as stored,
        also when a dead predecessor left the entry mid-update (no waiting: nobody else
        writes it). The next ``write`` makes the entry consistent for readers again."""
        at = self._at(index)
        replica = _REPLICA_FIELDS.unpack_from(self._mm, at + _REPLICA_AT)
        return PartitionState(*_FIELDS.unpack_from(self._mm, at + _FIELDS_AT), *replica[:6], replica[6:-1],
                              replica[-1])

    def write(self, index: int, state: PartitionState) -> None:
        at = self._at(index)
        word = at >> 3
        words = self._words
        odd = words[word] | 1  # odd already if a dead predecessor stopped mid-update
        words[word] = odd
        _FIELDS.pack_into(self._mm, at + _FIELDS_AT, *state[:10])
        _REPLICA_FIELDS.pack_into(self._mm, at + _REPLICA_AT, *state[10:16], *state.isr_slots, state.generation)
        words[word] = odd + 1


def published_partitions(tables) -> list:
    """``[(topic, partition, worker slot, PartitionState)]`` of every entry of every
    worker's table; an entry torn by a dead writer is left out until it is rewritten,
    and so is one whose topic was deleted (``Role.DELETED``)."""
    rows = []
    for slot, table in enumerate(tables):
        for index, topic, partition in table.names():
            try:
                state = table.read(index)
            except TornEntryError:
                continue
            if state.role != Role.DELETED:
                rows.append((topic, partition, slot, state))
    return rows
