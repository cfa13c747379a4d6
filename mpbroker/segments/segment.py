"""One segment file: the bytes of a partition log from one base offset on.

A segment holds message-set bytes exactly as they travel, in a file named by its base
offset. It appends with O_APPEND writes (one ``write``/``writev`` per append), makes
its data durable with ``fdatasync``, and undoes a partial append (disk full, I/O
error) by truncating back, so the file never keeps half a message set. A replica's
log cuts a segment durably (``truncate_durably``), removes it (``unlink``) or moves
it to another base (``rename``) when it truncates (``Log.truncate_to``).
"""

import errno
import os
import stat

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.segments.naming import segment_file_name

_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
IOV_MAX = 1024


class Segment:
    __slots__ = ("base", "path", "fd", "size", "created_ms", "dirty", "flushes_in_progress")

    def __init__(self, base: int, path: str, fd: int, size: int, created_ms: int):
        self.base = base
        self.path = path
        self.fd = fd
        self.size = size
        self.created_ms = created_ms  # first-append time; drives log.roll.hours
        self.dirty = False  # written since its last fdatasync began
        self.flushes_in_progress = 0  # while > 0 the fd is in use by a flusher: keep it open

    @classmethod
    def create(cls, directory: str, base: int, now_ms: int) -> "Segment":
        path = os.path.join(directory, segment_file_name(base))
        try:
            fd = os.open(path, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create segment {path}: {exc.strerror}") from exc
        return cls(base, path, fd, 0, now_ms)

    @classmethod
    def open(cls, directory: str, base: int) -> "Segment":
        path = os.path.join(directory, segment_file_name(base))
        fd = os.open(path, _OPEN_FLAGS)
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        return cls(base, path, fd, status.st_size, status.st_mtime_ns // 1_000_000)

    @property
    def end(self) -> int:
        return self.base + self.size

    def append(self, data) -> None:
        """Append one buffer; on failure the file is as it was and StorageError is raised."""
        self.append_many((data,))

    def append_many(self, buffers) -> None:
        """Append several buffers with as few ``writev`` calls as possible."""
        start = self.size
        total = sum(map(len, buffers))
        try:
            pending, left = buffers, total
            while pending:
                batch = pending[:IOV_MAX]
                count = os.writev(self.fd, batch)
                if count == left and len(batch) == len(pending):  # usually all at once
                    break
                if pending is buffers:  # more to write: slices of what is left, without copies
                    pending = [memoryview(buffer) for buffer in buffers]
                pending = _drop_written(pending, count)
                left -= count
        except OSError as exc:
            self._undo_partial_append(start, exc)
        self.size = start + total
        self.dirty = True

    def _undo_partial_append(self, start: int, cause: OSError):
        try:
            os.ftruncate(self.fd, start)
        except OSError as exc:
            raise LogCorruptError(
                f"append to {self.path} failed ({cause.strerror}) and the partial write "
                f"could not be undone ({exc.strerror}); recovery will truncate it on restart"
            ) from cause
        reason = "disk full" if cause.errno in (errno.ENOSPC, errno.EDQUOT) else cause.strerror
        raise StorageError(f"append to {self.path} failed: {reason}; nothing was written") from cause

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def truncate_durably(self, size: int) -> None:
        """Cut the file to ``size`` bytes and ``fsync`` it: the cut bytes cannot come back
        after a power cut. On OSError ``size`` is what the file holds, and it is dirty."""
        try:
            os.ftruncate(self.fd, size)
            self.size = size
            os.fsync(self.fd)
        except OSError:
            self.dirty = True
            try:
                self.size = os.fstat(self.fd).st_size
            except OSError:
                pass
            raise
        self.dirty = False  # everything it holds is on disk

    def unlink(self) -> None:
        """Remove the file, then close it; on OSError it stays linked and open."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.close()

    def rename(self, base: int) -> None:
        """Move the file to the name of ``base`` in its directory and take that base
        (the directory must be synced for the new name to be durable). OSError, with
        the segment unchanged, when the name is taken or the rename fails."""
        path = os.path.join(os.path.dirname(self.path), segment_file_name(base))
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        os.rename(self.path, path)
        self.base, self.path = base, path

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def mtime_ms(self) -> int:
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _drop_written(buffers, count: int):
    """The part of ``buffers`` not yet covered by ``count`` written bytes."""
    index = 0
    while index < len(buffers) and count >= len(buffers[index]):
        count -= len(buffers[index])
        index += 1
    rest = buffers[index:]
    if rest and count:
        rest[0] = rest[0][count:]
    return rest
