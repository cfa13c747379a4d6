"""The acceptor's read side of the partition logs: fetch and OFFSETS answered from the
segment files, without the owning worker.

Each worker publishes, per partition, the log start, the flushed end and a segment
list version in its partition table. Here we find a partition's entry (cached by
name), read it under its sequence lock, re-list the partition directory when the
version moved, and open segment files read-only on first use. The answers come from
the code the Log reads with: ``log_view.locate`` (a fetch's ``FileRange``) and
``offsets.offsets_before`` (OFFSETS). An open file is reference counted: a range
still being sent keeps it open even after retention removed it from the list (on
Linux the open file stays readable after unlink).

Replicated partitions: a consumer reads below the high watermark the leader
published (not the flushed end), and a replica that does not lead answers NOT_LEADER.
A follower's fetch (``replica_fetch``) reads up to the log end instead, checks the
leader epoch it acts under, and gets the epoch its bytes were written in: the
current one from the table, an older one from the partition's
``leader-epoch-checkpoint`` (read once per leader epoch: the history below the
current epoch does not change while it lasts); the bytes never cross an epoch's end.
``epoch_end`` answers LEADER_EPOCH_END from the same file.

A log of modern record batches (``segments.record_format``) is fetched over 0.7 too:
its bytes are sent as they are (sendfile) under error code RECORD_BATCHES (13), so a
0.7 client that does not know it stops instead of reading batches as messages. The
answer starts at a batch: at the fetch offset when a batch starts there, else at the
start of the batch holding it (found as the modern fetch finds it,
``kafka.reads.batch_start``), since a reader commits the offsets of records, which lie
inside their batch; the client skips the records below its offset. Followers'
fetches are not changed.

A deleted topic's entries say ``Role.DELETED``: such a partition reads as one no
worker has (an empty 0.7 answer; the modern reads say the topic is unknown), and its
view lets go of its open files. Each deletion bumps the entry's generation, so a view
that cached the files or format of a log deleted and made anew since (without seeing
it deleted in between) starts over too.
"""

import bisect
import errno
import os

from mpbroker.acceptor.kafka.reads import batch_start
from mpbroker.clock import wall_clock_ms
from mpbroker.codec.errors import ErrorCode, LogCorruptError, OffsetOutOfRangeError
from mpbroker.ipc.partition_table import Role, TornEntryError
from mpbroker.ownership import owner_slot
from mpbroker.segments.leader_epochs import UNDEFINED, LeaderEpochs
from mpbroker.segments.log_view import locate
from mpbroker.segments.naming import (
    LEADER_EPOCH_FILE,
    RECORD_BATCHES_FILE,
    list_segment_bases,
    partition_dir_name,
    segment_file_name,
)
from mpbroker.segments.offsets import offsets_before

_PATIENCE_WITH_FALLBACK_S = 0.002
_PATIENCE_S = 0.5


class SegmentFile:
    """A segment file open read-only; closed once retired and no range being sent holds it."""

    __slots__ = ("fd", "refs", "retired")

    def __init__(self, fd: int):
        self.fd = fd
        self.refs = 0
        self.retired = False

    def acquire(self) -> None:
        self.refs += 1

    def release(self) -> None:
        self.refs -= 1
        if self.retired and self.refs == 0:
            self._close()

    def retire(self) -> None:
        self.retired = True
        if self.refs == 0:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _PartitionView:
    __slots__ = ("table", "index", "directory", "version", "bases", "files", "last_state", "epochs", "record_batches",
                 "boundaries", "newest_times", "generation")

    def __init__(self, table, index: int, directory: str):
        self.table = table
        self.index = index
        self.directory = directory
        self.version = -1
        self.bases = []
        self.files = {}
        self.last_state = None  # the last consistent read: used while the entry is torn
        self.epochs = None  # (leader epoch, LeaderEpochs read while it was current)
        self.record_batches = None  # whether the log holds record batches (its format file; read once)
        self.boundaries = {}  # segment base -> known batch or message starts in it (modern reads)
        self.newest_times = {}  # segment base -> (read up to, its newest record time there): ListOffsets by time
        self.generation = 0  # the entry's generation these caches belong to

    def reset(self, generation: int) -> None:
        """Forget everything cached of the log: it was deleted (and maybe made anew)."""
        for segment_file in self.files.values():
            segment_file.retire()
        self.files = {}
        self.bases = []
        self.version = -1
        self.epochs = None
        self.record_batches = None
        self.boundaries = {}
        self.newest_times = {}
        self.generation = generation

    def refresh(self, state) -> None:
        """Re-list the segment files if the worker changed the segment list. A cached
        file whose name now holds another file (a replica's truncation deleted the
        segment and a later roll made one at the same base) is let go too."""
        if state.segments_version == self.version:
            return
        try:
            listed = list_segment_bases(self.directory)
        except FileNotFoundError:  # deleted a moment ago: the next read of the entry says so
            listed = []
        bases = [base for base in listed if base >= state.log_start]
        for base in [base for base in self.files if base < state.log_start or base not in bases
                     or not self._same_file(base)]:
            self.files.pop(base).retire()
        self.bases = bases
        self.version = state.segments_version

    def _same_file(self, base: int) -> bool:
        try:
            named = os.stat(os.path.join(self.directory, segment_file_name(base)))
            held = os.fstat(self.files[base].fd)
        except OSError:
            return False
        return (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)

    def file(self, index: int) -> SegmentFile:
        """The open file of the ``index``-th listed segment (``locate``'s ``file_at``)."""
        base = self.bases[index]
        found = self.files.get(base)
        if found is None:
            fd = os.open(os.path.join(self.directory, segment_file_name(base)), os.O_RDONLY | os.O_CLOEXEC)
            found = self.files[base] = SegmentFile(fd)
        return found


class SegmentFiles:
    def __init__(self, tables, log_dir: str, num_workers: int, clock_ms=wall_clock_ms):
        self._tables = tables
        self._log_dir = os.path.realpath(log_dir)
        self._num_workers = num_workers
        self._known = [0] * len(tables)  # entries of each table already indexed
        self._views = {}  # (topic, partition) -> _PartitionView
        self._topics = {}  # topic -> the views of its partitions indexed so far
        self._epoch_topics = {}  # topic -> topic_has_leader_epochs, while the first roles are awaited
        self._clock_ms = clock_ms

    def _view(self, topic: str, partition: int):
        view = self._views.get((topic, partition))
        if view is not None:
            return view
        slot = owner_slot(topic, partition, self._num_workers) if topic.isascii() else 0
        self._index(slot)
        return self._views.get((topic, partition))

    def _index(self, slot: int) -> None:
        """Index the entries the slot's worker added since last asked. What was indexed
        is counted from the names listed, not from the table's length read again: the
        worker may add an entry in between, and that entry would never be indexed."""
        table = self._tables[slot]
        added = table.names(self._known[slot])
        for index, name, number in added:
            view = self._views[(name, number)] = _PartitionView(
                table, index, os.path.join(self._log_dir, partition_dir_name(name, number)))
            self._topics.setdefault(name, []).append(view)
        self._known[slot] += len(added)

    def _index_all(self) -> None:
        """Index the partitions every worker has published since last asked."""
        for slot in range(len(self._tables)):
            self._index(slot)

    def partition_view(self, topic: str, partition: int):
        """The partition's view (None if no worker has its log): for the modern reads."""
        return self._view(topic, partition)

    @staticmethod
    def record_batches(view) -> bool:
        """Whether the view's log holds modern record batches (its format file, read once:
        a partition's format is fixed when its directory is made)."""
        if view.record_batches is None:
            view.record_batches = os.path.exists(os.path.join(view.directory, RECORD_BATCHES_FILE))
        return view.record_batches

    def partition_state(self, view):
        """The view's published state, its segment list brought up to date (may raise
        TornEntryError)."""
        return self._state(view)

    def topics(self) -> set:
        """Every topic some worker has a log of."""
        self._index_all()
        return {topic for topic, views in self._topics.items() if any(map(_has_log, views))}

    def knows_topic(self, topic: str) -> bool:
        """Whether any worker has a log of ``topic`` (not deleted)."""
        if any(map(_has_log, self._topics.get(topic, ()))):
            return True
        self._index_all()  # a partition published since (a new topic, or more partitions of one made anew)
        return any(map(_has_log, self._topics.get(topic, ())))

    def topic_has_leader_epochs(self, topic: str) -> bool:
        """Whether any partition log of ``topic`` has a leader-epoch file (the topic was
        replicated). Asked only until the first roles came, when no such file can
        appear (a worker writes one only for a role), so the answer is kept."""
        found = self._epoch_topics.get(topic)
        if found is None:
            self._index_all()
            found = any(os.path.exists(os.path.join(view.directory, LEADER_EPOCH_FILE))
                        for view in self._topics.get(topic, ()))
            if len(self._epoch_topics) < 100_000:
                self._epoch_topics[topic] = found
        return found

    def _state(self, view):
        """The partition's published state. If its writer died mid-update (until the
        respawned worker rewrites the entry), the last consistent state still
        describes bytes that are on disk."""
        try:
            # With a last good state to fall back on, do not hold the event loop for long.
            state = view.table.read(view.index, _PATIENCE_WITH_FALLBACK_S if view.last_state else _PATIENCE_S)
        except TornEntryError:
            if view.last_state is None:
                raise
            state = view.last_state
        view.last_state = state
        if state.generation != view.generation:
            view.reset(state.generation)
        if state.role == Role.DELETED:
            if view.files or view.bases:
                view.reset(state.generation)
            return state
        view.refresh(state)
        return state

    def fetch(self, topic: str, partition: int, offset: int, max_size: int):
        """``(error code, FileRange or None)``; an unknown partition is an empty answer.
        The range's file is a SegmentFile: ``acquire`` it to keep it open while sending."""
        if max_size < 0:
            return ErrorCode.INVALID_FETCH_SIZE, None
        view = self._view(topic, partition)
        if view is None:
            return ErrorCode.NO_ERROR, None
        try:
            state = self._state(view)
        except TornEntryError:
            return ErrorCode.UNKNOWN, None
        role = state.role
        if role == Role.DELETED:
            return ErrorCode.NO_ERROR, None  # as a partition no worker has
        if offset < state.log_start:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if role == Role.UNREPLICATED:
            end = state.flushed_end
        elif role == Role.LEADER:
            end = state.high_watermark
            if end < offset <= state.log_end:  # written, not yet on every in-sync replica
                return ErrorCode.NO_ERROR, None
        else:
            return ErrorCode.NOT_LEADER, None
        if self.record_batches(view):
            return self._fetch_batches(view, end, offset, max_size)
        return self._locate(view, end, offset, max_size)

    def _fetch_batches(self, view, end: int, offset: int, max_size: int):
        """A 0.7 fetch of a record-batch log: from the start of the batch holding
        ``offset``, with RECORD_BATCHES when it sends bytes (see the module docstring)."""
        start = offset
        bases = view.bases
        if bases and bases[0] <= offset < end:
            index = bisect.bisect_right(bases, offset) - 1
            segment_end = min(bases[index + 1], end) if index + 1 < len(bases) else end
            try:
                start = batch_start(view, view.file(index), bases[index], segment_end, offset)
            except FileNotFoundError:  # deleted by retention since we listed it
                view.version = -1
                return ErrorCode.OFFSET_OUT_OF_RANGE, None
        error, found = self._locate(view, end, start, max_size)
        if found is None:
            return error, None
        return ErrorCode.RECORD_BATCHES, found

    def _locate(self, view, end: int, offset: int, max_size: int):
        try:
            found = locate(view.bases, end, offset, max_size, view.file)
        except OffsetOutOfRangeError:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        except OSError as exc:  # opening the segment file
            if exc.errno == errno.ENOENT:  # deleted by retention since we listed it
                view.version = -1
                return ErrorCode.OFFSET_OUT_OF_RANGE, None
            raise
        if found.length == 0:
            return ErrorCode.NO_ERROR, None
        return ErrorCode.NO_ERROR, found

    def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int):
        """``(error code, [offsets])`` as PROTOCOL.md describes."""
        view = self._view(topic, partition)
        if view is None:
            return ErrorCode.NO_ERROR, offsets_before([], 0, time_ms, max_offsets, self._clock_ms())
        try:
            state = self._state(view)
        except TornEntryError:
            return ErrorCode.UNKNOWN, []
        if state.role == Role.DELETED:
            return ErrorCode.NO_ERROR, offsets_before([], 0, time_ms, max_offsets, self._clock_ms())
        if state.role not in (Role.UNREPLICATED, Role.LEADER):
            return ErrorCode.NOT_LEADER, []
        segments = []
        for base in view.bases:
            try:
                stat = os.stat(os.path.join(view.directory, segment_file_name(base)))
            except FileNotFoundError:
                continue
            segments.append((base, stat.st_mtime_ns // 1_000_000))
        return ErrorCode.NO_ERROR, offsets_before(segments, state.visible_end, time_ms, max_offsets,
                                                  self._clock_ms())

    # --- replication ---------------------------------------------------------------

    def leader_state(self, topic: str, partition: int, leader_epoch: int):
        """``(error, view, state)``: the partition's state if this broker leads it at
        ``leader_epoch``; else the error to answer (NOT_LEADER, FENCED_LEADER_EPOCH for
        an older epoch, UNKNOWN_LEADER_EPOCH for a newer one)."""
        view = self._view(topic, partition)
        if view is None:
            return ErrorCode.NOT_LEADER, None, None
        try:
            state = self._state(view)
        except TornEntryError:
            return ErrorCode.UNKNOWN, None, None
        if state.role != Role.LEADER:
            return ErrorCode.NOT_LEADER, None, None
        if leader_epoch != state.leader_epoch:
            return (ErrorCode.FENCED_LEADER_EPOCH if leader_epoch < state.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH), None, None
        return ErrorCode.NO_ERROR, view, state

    def role(self, topic: str, partition: int) -> int:
        """The role this broker published for the partition (UNREPLICATED if it has no log here)."""
        view = self._view(topic, partition)
        if view is None:
            return Role.UNREPLICATED
        try:
            return self._state(view).role
        except TornEntryError:
            return Role.OFFLINE

    def replica_fetch(self, view, state, offset: int, max_size: int):
        """``(error, epoch, FileRange or None)`` for a follower reading at ``offset``."""
        if offset < state.log_start or offset > state.log_end:
            return ErrorCode.OFFSET_OUT_OF_RANGE, UNDEFINED, None
        if offset >= state.epoch_start:
            epoch, end = state.leader_epoch, state.log_end
        else:
            try:
                epoch, end = self._older_epoch(view, state, offset)
            except LogCorruptError:
                return ErrorCode.UNKNOWN, UNDEFINED, None
        error, found = self._locate(view, end, offset, max_size)
        return error, epoch, found

    def _epochs(self, view, state) -> LeaderEpochs:
        if view.epochs is None or view.epochs[0] != state.leader_epoch:
            view.epochs = (state.leader_epoch, LeaderEpochs.load(view.directory))
        return view.epochs[1]

    def _older_epoch(self, view, state, offset: int) -> tuple:
        """``(epoch the byte at offset was written in, where that epoch ends)``."""
        entries = self._epochs(view, state).entries
        epoch, end = UNDEFINED, state.epoch_start
        for index, entry in enumerate(entries):
            if entry.start_offset > offset:
                end = min(entry.start_offset, state.epoch_start)
                break
            epoch = entry.epoch
        return epoch, end

    def epoch_end(self, view, state, epoch: int) -> tuple:
        """``(error, epoch, end offset)``: LEADER_EPOCH_END's answer."""
        try:
            found = self._epochs(view, state).end_offset_for(epoch, state.log_end)
        except LogCorruptError:
            return ErrorCode.UNKNOWN, UNDEFINED, UNDEFINED
        return ErrorCode.NO_ERROR, found.epoch, found.start_offset

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: what was known of it is asked again."""
        self._epoch_topics.pop(topic, None)

    def close(self) -> None:
        for view in self._views.values():
            for segment_file in view.files.values():
                segment_file.retire()
            view.files.clear()


def _has_log(view) -> bool:
    """Whether the view's entry describes a log (its topic was not deleted)."""
    try:
        return view.table.read(view.index, _PATIENCE_WITH_FALLBACK_S).role != Role.DELETED
    except TornEntryError:
        return True  # its writer died mid-update: a log it was writing
