"""The blocking step of a log flush, and what it carries: a ``PendingFlush`` (what
``Log.begin_flush`` noted) made durable by ``sync_pending`` on any thread, and the
errors it may end with. Split from the Log (``log``), which owns the accounting of what
is flushed; this module touches nothing but the file descriptors and paths it is given.
"""

import errno
import os
from typing import NamedTuple

from mpbroker.codec.errors import StorageError
from mpbroker.segments.durability import sync_directory
from mpbroker.segments.segment import Segment


class LogRemovedError(StorageError):
    """A segment file of a log was removed or replaced behind the broker's back."""


class FlushPostponedError(StorageError):
    """A flush could not finish for a passing reason (no free file descriptor)."""


class PendingFlush(NamedTuple):
    segments: tuple  # segments whose data must reach the disk
    directories: tuple  # directories whose entries changed: the partition's, and log.dir for a new partition
    end: int  # log end when the flush began: what becomes visible (and durable) when it is done
    messages: int  # unflushed messages it covers (none an earlier flush in flight covers)
    oldest_ms: int  # timer clock: when the oldest of them was appended


def sync_pending(pending: PendingFlush) -> None:
    """Make a pending flush durable: ``fdatasync`` each segment in log order, then
    ``fsync`` the directories whose entries changed (a rolled segment's name becomes
    durable only after the data before it). Blocking; safe on another thread.

    Raises OSError when a sync fails, LogRemovedError when a segment file was unlinked
    or replaced behind the broker's back (its data would be gone at the next start),
    FlushPostponedError when no file descriptor was free to open a directory (the
    segments were synced; the flush is tried again later)."""
    for segment in pending.segments:
        os.fdatasync(segment.fd)
        _check_still_linked(segment)
    for directory in pending.directories:
        try:
            sync_directory(directory)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise FlushPostponedError(f"cannot open {directory} to sync it: {exc.strerror}") from exc
            raise


def _check_still_linked(segment: Segment) -> None:
    """The segment's file is still the one at its path (one fstat and one stat)."""
    status = os.fstat(segment.fd)
    try:
        linked = status.st_nlink > 0 and os.stat(segment.path).st_ino == status.st_ino
    except FileNotFoundError:
        linked = False
    if not linked:
        raise LogRemovedError(f"{segment.path} was removed while the broker ran (rm of the partition "
                              "directory?): what it held is gone from disk")
