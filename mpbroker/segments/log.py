"""A partition log: ordered segments, append, read, flush, roll and retention.

Offsets are byte positions in the partition: a message set appended at offset ``o``
occupies ``[o, o + len)``, and segment files are named by the offset of their first
byte. Only flushed bytes are visible to readers (``flushed_end``). Flushing is split
in three steps, so the owner may run the slow ``fdatasync`` on another thread while
appends go on: ``begin_flush`` (cheap, on the owner's thread), ``sync_pending``
(blocking, any thread), ``finish_flush`` (cheap, owner's thread). ``flush`` does all
three at once (the blocking step and what it carries: ``flushing``).

A replicated partition's log also keeps its leader epochs (``leader_epochs``, the
``leader-epoch-checkpoint`` file: where each epoch began; ``assign_epoch``). A follower
cuts its log where it diverges from its leader's (``truncate_to``), or starts it afresh
at the leader's log start (``truncate_fully_and_start_at``); both drop the epochs past
the cut and are durable before they return, so the cut bytes never come back.

A Log is used by one thread at a time (its owner); only ``sync_pending`` may run
elsewhere, and it touches nothing but file descriptors the Log keeps open for it.
"""

import logging
import os
from bisect import bisect_right

from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments import retention, truncation
from mpbroker.segments.batch_headers import iter_batch_headers
from mpbroker.segments.flushing import LogRemovedError, PendingFlush, sync_pending
from mpbroker.segments.leader_epochs import LeaderEpochs
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_view import FileRange, locate
from mpbroker.segments.naming import partition_path
from mpbroker.segments.offsets import offsets_before
from mpbroker.segments.record_format import holds_record_batches, mark_record_batches
from mpbroker.segments.recovery import open_segments
from mpbroker.segments.segment import Segment

log = logging.getLogger(__name__)


class Log:
    def __init__(self, topic: str, partition: int, directory: str, config: LogConfig,
                 segments: list, clock_ms=wall_clock_ms, timer_ms=monotonic_ms, leader_epochs=None):
        if not segments:
            raise ValueError("a log has at least one segment")
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self._clock_ms = clock_ms  # dates: segment creation (roll by age), retention, OFFSETS
        self._timer_ms = timer_ms  # intervals: how long appended messages have waited for a flush
        self._segments = segments
        self._bases = [segment.base for segment in segments]
        self.log_end = segments[-1].end
        # What is on disk at open time is what readers may see.
        self.flushed_end = self.log_end
        # Everything before the recovery point is durable: a completed flush covered it
        # (or the last shutdown was clean). None: not known (recovered without one).
        self.recovery_point = self.log_end
        self._unflushed_messages = 0  # appended and not yet made durable by a completed flush
        self._in_flight_messages = 0  # ... of which flushes in flight cover these
        self._uncovered_since_ms = 0  # timer clock: when the oldest message no flush covers was appended
        self._dirty_directories = set()  # directories to fsync with the next flush
        self.segments_version = 0  # bumped whenever the segment list changes
        self.failure = None  # why this log takes no more appends (its files were removed)
        self.recovery_scanned = 0  # bytes recovery read when the log was opened
        self.record_batches = False  # holds modern record batches, not 0.7 messages (record_format)
        self._epochs = LeaderEpochs(directory) if leader_epochs is None else leader_epochs
        self._epochs_unsaved = False  # a write of the epochs failed: the file may not hold them
        self._flushes_in_flight = 0  # begun, not finished: no truncation meanwhile

    @classmethod
    def open(cls, log_dir: str, topic: str, partition: int, config: LogConfig, *,
             recover: bool, recovery_point: int | None = None, clock_ms=wall_clock_ms,
             timer_ms=monotonic_ms, record_batches: bool = False) -> "Log":
        """Open (creating if needed) the log of ``topic``/``partition`` under ``log_dir``;
        a new one holds record batches if ``record_batches`` (``record_format``).
        With ``recover``, repair what lies past ``recovery_point`` (see ``recovery``); the
        recovered segments count as unflushed until the next flush covers them."""
        topic = check_topic(topic)
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        directory = partition_path(log_dir, topic, partition)
        created = False
        try:
            os.mkdir(directory, 0o755)
            created = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
        try:
            # A damaged epoch file is refused before recovery changes anything.
            epochs = LeaderEpochs(directory) if created else LeaderEpochs.load(directory)
            if created and record_batches:
                mark_record_batches(directory)
            record_batches = holds_record_batches(directory)
            segments, scanned = ([], 0) if created else open_segments(directory, recover=recover,
                                                                         recovery_point=recovery_point,
                                                                         record_batches=record_batches)
            first_segment_made = not segments
            if first_segment_made:
                segments = [Segment.create(directory, 0, clock_ms())]
        except BaseException:
            if created:  # a refused new partition leaves no empty directory behind
                _remove_empty_directory(directory)
            raise
        instance = cls(topic, partition, directory, config, segments, clock_ms, timer_ms, epochs)
        instance.recovery_scanned = scanned
        instance.record_batches = record_batches
        instance._fit_epochs_to_log()
        if created:
            instance.recovery_point = 0
            instance._dirty_directories.update((directory, os.path.dirname(directory)))
        elif recover:
            instance._recovered(recovery_point)
        if first_segment_made:  # an empty directory: made by an earlier life that died, perhaps not durable
            instance._dirty_directories.update((directory, os.path.dirname(directory)))
        return instance

    def _recovered(self, recovery_point: int | None) -> None:
        """After recovery nothing past the recovery point is known to be durable (the
        page cache of a crashed process may still hold it): the next flush syncs every
        segment from there on, and the directory (truncations, deletions)."""
        if recovery_point is None or recovery_point > self.log_end:
            self.recovery_point = None
            unsynced = self._segments
        else:
            self.recovery_point = max(recovery_point, self.log_start)
            unsynced = [segment for segment in self._segments if segment.end > self.recovery_point]
        for segment in unsynced:
            segment.dirty = True
        if unsynced:
            self._dirty_directories.add(self.directory)

    def _fit_epochs_to_log(self) -> None:
        """Epochs that began past the log end (a crash or failure between a truncation or
        recovery and the epochs' rewrite) or below the log start (retention's) are fitted
        to the log. One that begins at the log end stays: a leader records its epoch there."""
        changed = self._epochs.truncate_from_end(self.log_end + 1)
        changed = self._epochs.truncate_from_start(self.log_start) or changed
        if changed:
            log.warning("%s: leader epochs fitted to the log [%d, %d]: %s", self.directory, self.log_start,
                        self.log_end, self._epochs.entries)
            self._save_epochs_quietly()

    # --- state -----------------------------------------------------------------

    @property
    def log_start(self) -> int:
        return self._bases[0]

    @property
    def size(self) -> int:
        return self.log_end - self.log_start

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_bases(self) -> list:
        return list(self._bases)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def leader_epochs(self) -> LeaderEpochs:
        """The partition's leader epochs; change them through the Log (``assign_epoch``)."""
        return self._epochs

    @property
    def flush_in_flight(self) -> bool:
        """A flush began and has not finished (a truncation waits for it)."""
        return self._flushes_in_flight > 0

    # --- append ----------------------------------------------------------------

    def append(self, message_set, messages: int) -> int:
        """Append an already validated message set of ``messages`` messages; return
        the offset it was written at. Raises StorageError with the log unchanged."""
        return self.append_many((message_set,), messages)

    def append_many(self, message_sets, messages: int) -> int:
        """Append several validated sets back to back; return the offset of the first.
        The caller can derive each set's offset from the lengths. The sets that fit in
        the active segment go in one ``writev``; the log rolls between two sets where
        the next would push a non-empty segment past ``log.file.size`` (a segment
        exceeds it only by a single set larger than the limit). On StorageError the log
        is as it was."""
        if self.failure is not None:
            raise StorageError(self.failure)
        now = self._clock_ms()
        limit = self.config.segment_bytes
        offset = self.log_end
        segments_before = len(self._segments)
        written = []  # (segment, its size before this append)
        try:
            active = self._segments[-1]
            if active.size > 0 and now - active.created_ms > self.config.roll_ms:
                active = self.roll(now)
            if active.size + sum(map(len, message_sets)) <= limit:  # the common case: no roll inside
                written.append(self._write_run(active, message_sets, now))
                message_sets = ()
            run, run_bytes = [], 0
            for message_set in message_sets:
                size = len(message_set)
                if active.size + run_bytes + size > limit and active.size + run_bytes > 0:
                    if run:
                        written.append(self._write_run(active, run, now))
                        run, run_bytes = [], 0
                    active = self.roll(now)  # at the log end, which the run moved
                run.append(message_set)
                run_bytes += size
            if run:
                written.append(self._write_run(active, run, now))
        except StorageError:
            self._undo_append(written, segments_before)
            self.log_end = offset
            raise
        if self._unflushed_messages == self._in_flight_messages:  # the first no flush covers
            self._uncovered_since_ms = self._timer_ms()
        self._unflushed_messages += messages
        return offset

    def _write_run(self, segment: Segment, run: list, now: int) -> tuple:
        size_before = segment.size
        if size_before == 0:
            segment.created_ms = now
        segment.append_many(run)  # undoes its own partial write on failure
        self.log_end = segment.end
        return segment, size_before

    def _undo_append(self, written: list, segments_before: int) -> None:
        """Take back the runs an append wrote before a later run or roll failed."""
        try:
            for segment, size_before in written:
                if segment in self._segments[:segments_before]:
                    segment.truncate(size_before)
            for segment in self._segments[segments_before:]:
                segment.delete()
        except OSError as exc:
            raise LogCorruptError(f"an append to {self.directory} failed and could not be taken back "
                                  f"({exc.strerror}); recovery will repair the log on restart") from exc
        if len(self._segments) > segments_before:
            del self._segments[segments_before:]
            del self._bases[segments_before:]
            self.segments_version += 1

    def roll(self, now_ms: int | None = None) -> Segment:
        """Start a new, empty active segment at the log end (the old one keeps its
        unflushed data until the next flush)."""
        now = self._clock_ms() if now_ms is None else now_ms
        if self._segments[-1].size == 0:
            return self._segments[-1]
        segment = Segment.create(self.directory, self.log_end, now)
        self._segments.append(segment)
        self._bases.append(segment.base)
        self._dirty_directories.add(self.directory)
        self.segments_version += 1
        log.debug("rolled %s-%d to a new segment at %d", self.topic, self.partition, segment.base)
        return segment

    # --- read ------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> FileRange:
        """The range of a segment file (a ``Segment``) a fetch at ``offset`` of up to
        ``max_bytes`` answers with; never past the flushed end nor across a segment end
        (OffsetOutOfRangeError outside the log). The acceptor answers fetches through
        the same ``locate``."""
        return locate(self._bases, self.flushed_end, offset, max_bytes, self._segments.__getitem__)

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        found = self.read(offset, max_bytes)
        return os.pread(found.file.fd, found.length, found.position) if found.length else b""

    def batch_headers(self, from_offset: int | None = None):
        """``(position, BatchHeader)`` of every record batch stored from the segment
        holding ``from_offset`` (default: the log start) to the log end, flushed or not,
        oldest first (``batch_headers``); for a log of record batches, on the owner's
        thread. The batch stored at [p, q) with n records has offsets q - n .. q - 1."""
        index = 0 if from_offset is None else max(bisect_right(self._bases, from_offset) - 1, 0)
        return iter_batch_headers(self._segments[index:], self._bases[index])

    def offsets_before(self, time_ms: int, max_offsets: int) -> list:
        segments = [(segment.base, segment.mtime_ms()) for segment in self._segments]
        return offsets_before(segments, self.flushed_end, time_ms, max_offsets, self._clock_ms())

    # --- flush -----------------------------------------------------------------

    def flush_due(self, now_ms: int | None = None) -> bool:
        """Whether the messages no flush in flight covers are due, by their count or the
        age of the oldest (a flush in flight already takes care of the others). ``now_ms``
        is on the timer clock (``monotonic_ms``)."""
        if self.failure is not None:
            return False
        now = self._timer_ms() if now_ms is None else now_ms
        return self.config.flush_due(self._unflushed_messages - self._in_flight_messages,
                                     self._uncovered_since_ms, now)

    @property
    def needs_flush(self) -> bool:
        if self.failure is not None:
            return False  # its files are gone: nothing to make durable
        return (self.recovery_point is None or self.recovery_point < self.log_end
                or bool(self._dirty_directories))

    def begin_flush(self) -> PendingFlush:
        """Note what a flush will cover; pair with ``sync_pending`` and ``finish_flush``."""
        dirty = tuple(segment for segment in self._segments if segment.dirty)
        for segment in dirty:
            segment.dirty = False
            segment.flushes_in_progress += 1
        self._flushes_in_flight += 1
        covered = self._unflushed_messages - self._in_flight_messages
        self._in_flight_messages += covered
        pending = PendingFlush(
            dirty,
            tuple(sorted(self._dirty_directories, key=len, reverse=True)),  # a partition's before log.dir
            self.log_end,
            covered,
            self._uncovered_since_ms,
        )
        self._dirty_directories.clear()
        return pending

    def finish_flush(self, pending: PendingFlush, error: BaseException | None = None) -> None:
        """Make the flushed bytes visible, or (``error``) keep them pending and raise."""
        for segment in pending.segments:
            segment.flushes_in_progress -= 1
        self._flushes_in_flight -= 1
        self._in_flight_messages -= pending.messages
        if error is not None:
            if pending.messages:  # covered no more: the oldest uncovered may be one of them now
                uncovered_before = self._unflushed_messages - self._in_flight_messages - pending.messages
                self._uncovered_since_ms = pending.oldest_ms if uncovered_before <= 0 \
                    else min(pending.oldest_ms, self._uncovered_since_ms)
            for segment in pending.segments:
                segment.dirty = True
            self._dirty_directories.update(pending.directories)
            if isinstance(error, LogRemovedError):
                self.failure = f"{error}; appends are refused until the broker restarts"
            if isinstance(error, StorageError):
                raise error
            raise StorageError(f"flush of {self.directory} failed: {error}") from error
        if pending.end > self.flushed_end:
            self.flushed_end = pending.end
        # Every earlier flush completed (one at a time; a failed one stops the owner), so
        # with this one everything before its end is on disk.
        if self.recovery_point is None or pending.end > self.recovery_point:
            self.recovery_point = pending.end
        self._unflushed_messages -= pending.messages

    def flush(self) -> None:
        """Flush now, on this thread."""
        if not self.needs_flush:
            return
        pending = self.begin_flush()
        try:
            sync_pending(pending)
        except (OSError, StorageError) as exc:
            self.finish_flush(pending, exc)  # raises StorageError
        else:
            self.finish_flush(pending)

    # --- retention -------------------------------------------------------------

    def apply_retention(self, now_ms: int | None = None) -> list:
        """Delete whole old segments by age and size; return the deleted bases."""
        now = self._clock_ms() if now_ms is None else now_ms
        config = self.config
        expired = retention.expired_by_age(
            [segment.mtime_ms() for segment in self._segments], now, config.retention_ms
        )
        if expired == len(self._segments) and self._segments[-1].size > 0:
            self.roll(now)  # every segment expired: keep a fresh, empty active one
        expired = min(expired, len(self._segments) - 1)
        expired += retention.excess_by_size(
            [segment.size for segment in self._segments[expired:]], config.retention_bytes
        )
        deleted = []
        for segment in self._segments[:expired]:
            if segment.flushes_in_progress:
                break  # its fd is being synced; it goes at the next cleanup
            deleted.append(segment)
        if not deleted:
            return []
        for segment in deleted:
            log.info("retention: deleting %s (%d bytes)", segment.path, segment.size)
            segment.delete()
        del self._segments[:len(deleted)]
        del self._bases[:len(deleted)]
        self.segments_version += 1
        # Deleted data cannot be waiting for a flush any more.
        self.flushed_end = max(self.flushed_end, self.log_start)
        if self.recovery_point is not None:
            self.recovery_point = max(self.recovery_point, self.log_start)
        if self._epochs.truncate_from_start(self.log_start) or self._epochs_unsaved:
            self._save_epochs_quietly()  # an epoch starting below the log start misleads no one
        return [segment.base for segment in deleted]

    # --- leader epochs and truncation (replication) ------------------------------

    def assign_epoch(self, epoch: int, start_offset: int | None = None) -> bool:
        """Record that the bytes from ``start_offset`` (default: the log end) on are
        written under ``epoch``: a leader calls it when it becomes leader, a follower
        before it appends bytes of a newer epoch. A no-op (False) unless ``epoch`` is
        newer than the latest; otherwise the file is rewritten durably before it
        returns True. ValueError for an offset outside [log start, log end] or before
        the latest epoch's start; StorageError when the file cannot be written."""
        start = self.log_end if start_offset is None else start_offset
        if epoch < 0:
            raise ValueError(f"a leader epoch is >= 0, not {epoch}")
        if not self.log_start <= start <= self.log_end:
            raise ValueError(f"epoch {epoch} cannot start at {start}, outside the log "
                             f"[{self.log_start}, {self.log_end}] of {self.directory}")
        changed = self._epochs.assign(epoch, start)
        if changed or self._epochs_unsaved:
            self._save_epochs()
        return changed

    def truncate_to(self, offset: int) -> int:
        """Cut the log so that it ends at ``offset``: the segment holding it is cut
        there (emptied when ``offset`` is its base), every later one deleted; the log
        end, flushed end and recovery point come down to at most ``offset``; the epochs
        that began at or after it are forgotten. Durable before it returns (see
        ``truncation``). Returns the new log end; past the log end nothing changes.
        ValueError below the log start (see ``truncate_fully_and_start_at``);
        RuntimeError while a flush is in flight; StorageError when a file operation
        fails, with the Log matching the disk (a prefix of the old log)."""
        if offset > self.log_end:
            return self.log_end
        try:
            truncation.truncate_to(self, offset)
        except StorageError:
            self._fit_epochs_to_log()  # to what is left
            raise
        if self._epochs.truncate_from_end(offset) or self._epochs_unsaved:
            self._save_epochs()
        return self.log_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every byte and start an empty log at ``offset`` (a follower whose
        position fell below its leader's log start): afterwards log start, log end,
        flushed end and recovery point are all ``offset``, and there are no epochs.
        Durable before it returns. RuntimeError while a flush is in flight;
        StorageError when a file operation fails, with the Log matching the disk."""
        try:
            truncation.restart_at(self, offset)
        except StorageError:
            self._fit_epochs_to_log()
            raise
        if self._epochs.clear() or self._epochs_unsaved:
            self._save_epochs()

    def _save_epochs(self) -> None:
        self._epochs_unsaved = True
        try:
            self._epochs.write()
        except OSError as exc:
            raise StorageError(f"cannot write the leader epochs {self._epochs.path}: {exc.strerror or exc}") from exc
        self._epochs_unsaved = False

    def _save_epochs_quietly(self) -> None:
        try:
            self._save_epochs()
        except StorageError as exc:
            log.error("%s; it is written again at the next change", exc)

    # --- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every segment (a log whose files were removed is only closed)."""
        try:
            if self.failure is None:
                self.flush()
        finally:
            for segment in self._segments:
                segment.close()

    def discard(self) -> None:
        """Close every segment without a flush: the log is being deleted (no flush of
        it may be in flight)."""
        if self._flushes_in_flight:
            raise RuntimeError(f"{self.directory}: a flush is in flight")
        self.failure = "the topic was deleted"
        for segment in self._segments:
            segment.close()


def _remove_empty_directory(directory: str) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass
