"""A partition log: ordered segments, append, read, flush, roll and retention.

Offsets are byte positions in the partition: a message set appended at offset ``o``
occupies ``[o, o + len)``, and segment files are named by the offset of their first
byte. Only flushed bytes are visible to readers (``flushed_end``). Flushing is split
in three steps, so the owner may run the slow ``fdatasync`` on another thread while
appends go on: ``begin_flush`` (cheap, on the owner's thread), ``sync_pending``
(blocking, any thread), ``finish_flush`` (cheap, owner's thread). ``flush`` does all
three at once.

A Log is used by one thread at a time (its owner); only ``sync_pending`` may run
elsewhere, and it touches nothing but file descriptors the Log keeps open for it.
"""

import logging
import os
from typing import NamedTuple

from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.durability import sync_directory
from mpbroker.errors import StorageError
from mpbroker.segments import retention
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_view import locate
from mpbroker.segments.naming import check_topic, partition_path
from mpbroker.segments.offsets import offsets_before
from mpbroker.segments.recovery import open_segments
from mpbroker.segments.segment import Segment

log = logging.getLogger(__name__)


class FileRegion(NamedTuple):
    """Bytes of a segment file to hand to ``os.sendfile``."""

    fd: int
    position: int
    length: int


class PendingFlush(NamedTuple):
    segments: tuple  # segments whose data must reach the disk
    directory: str | None  # the partition directory, when a segment was created since the last flush
    end: int  # log end when the flush began: what becomes visible when it is done
    messages: int  # unflushed messages it covers
    began_ms: int  # timer clock


class Log:
    def __init__(self, topic: str, partition: int, directory: str, config: LogConfig,
                 segments: list, clock_ms=wall_clock_ms, timer_ms=monotonic_ms):
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
        self._unflushed_messages = 0
        self._unflushed_since_ms = 0
        self._directory_dirty = False
        self.segments_version = 0  # bumped whenever the segment list changes

    @classmethod
    def open(cls, log_dir: str, topic: str, partition: int, config: LogConfig, *,
             recover: bool, clock_ms=wall_clock_ms, timer_ms=monotonic_ms) -> "Log":
        """Open (creating if needed) the log of ``topic``/``partition`` under ``log_dir``."""
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
        segments = open_segments(directory, recover=recover)
        if not segments:
            segments = [Segment.create(directory, 0, clock_ms())]
            created = True
        instance = cls(topic, partition, directory, config, segments, clock_ms, timer_ms)
        instance._directory_dirty = created
        return instance

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

    # --- append ----------------------------------------------------------------

    def append(self, message_set, messages: int) -> int:
        """Append an already validated message set of ``messages`` messages; return
        the offset it was written at. Raises StorageError with the log unchanged."""
        return self.append_many((message_set,), messages)

    def append_many(self, message_sets, messages: int) -> int:
        """Append several validated sets back to back with one ``writev``; return the
        offset of the first. The caller can derive each set's offset from the lengths."""
        now = self._clock_ms()
        total = sum(len(message_set) for message_set in message_sets)
        active = self._segments[-1]
        if active.size > 0 and (
            active.size + total > self.config.segment_bytes
            or now - active.created_ms > self.config.roll_ms
        ):
            active = self.roll(now)
        offset = self.log_end
        if active.size == 0:
            active.created_ms = now
        active.append_many(message_sets)
        self.log_end = offset + total
        if self._unflushed_messages == 0:
            self._unflushed_since_ms = self._timer_ms()
        self._unflushed_messages += messages
        return offset

    def roll(self, now_ms: int | None = None) -> Segment:
        """Start a new, empty active segment at the log end (the old one keeps its
        unflushed data until the next flush)."""
        now = self._clock_ms() if now_ms is None else now_ms
        if self._segments[-1].size == 0:
            return self._segments[-1]
        segment = Segment.create(self.directory, self.log_end, now)
        self._segments.append(segment)
        self._bases.append(segment.base)
        self._directory_dirty = True
        self.segments_version += 1
        log.debug("rolled %s-%d to a new segment at %d", self.topic, self.partition, segment.base)
        return segment

    # --- read ------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> FileRegion:
        """The file region a fetch at ``offset`` of up to ``max_bytes`` answers with;
        never past the flushed end nor across a segment end (OffsetOutOfRangeError
        outside the log)."""
        extent = locate(self._bases, self.flushed_end, offset, max_bytes)
        return FileRegion(self._segments[extent.index].fd, extent.position, extent.length)

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        region = self.read(offset, max_bytes)
        return os.pread(region.fd, region.length, region.position)

    def offsets_before(self, time_ms: int, max_offsets: int) -> list:
        segments = [(segment.base, segment.mtime_ms()) for segment in self._segments]
        return offsets_before(segments, self.flushed_end, time_ms, max_offsets, self._clock_ms())

    # --- flush -----------------------------------------------------------------

    def flush_due(self, now_ms: int | None = None) -> bool:
        """``now_ms`` is on the timer clock (``monotonic_ms``)."""
        now = self._timer_ms() if now_ms is None else now_ms
        return self.config.flush_due(self._unflushed_messages, self._unflushed_since_ms, now)

    @property
    def needs_flush(self) -> bool:
        return self.flushed_end < self.log_end or self._directory_dirty

    def begin_flush(self) -> PendingFlush:
        """Note what a flush will cover; pair with ``sync_pending`` and ``finish_flush``."""
        dirty = tuple(segment for segment in self._segments if segment.dirty)
        for segment in dirty:
            segment.dirty = False
            segment.flushes_in_progress += 1
        pending = PendingFlush(
            dirty,
            self.directory if self._directory_dirty else None,
            self.log_end,
            self._unflushed_messages,
            self._timer_ms(),
        )
        self._directory_dirty = False
        return pending

    def finish_flush(self, pending: PendingFlush, error: BaseException | None = None) -> None:
        """Make the flushed bytes visible, or (``error``) keep them pending and raise."""
        for segment in pending.segments:
            segment.flushes_in_progress -= 1
        if error is not None:
            for segment in pending.segments:
                segment.dirty = True
            if pending.directory is not None:
                self._directory_dirty = True
            raise StorageError(f"flush of {self.directory} failed: {error}") from error
        if pending.end > self.flushed_end:
            self.flushed_end = pending.end
        self._unflushed_messages -= pending.messages
        if self._unflushed_messages > 0:
            self._unflushed_since_ms = pending.began_ms

    def flush(self) -> None:
        """Flush now, on this thread."""
        if not self.needs_flush:
            return
        pending = self.begin_flush()
        try:
            sync_pending(pending)
        except OSError as exc:
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
        return [segment.base for segment in deleted]

    # --- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every segment."""
        try:
            self.flush()
        finally:
            for segment in self._segments:
                segment.close()


def sync_pending(pending: PendingFlush) -> None:
    """Make a pending flush durable: ``fdatasync`` each segment, ``fsync`` the
    directory when a segment file was created. Blocking; safe on another thread."""
    for segment in pending.segments:
        os.fdatasync(segment.fd)
    if pending.directory is not None:
        sync_directory(pending.directory)
