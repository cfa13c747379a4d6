"""Making a directory's entries durable: a created, renamed or deleted name survives a
power cut only once the directory itself is fsync'ed. Shared by the log, the
clean-shutdown marker and the Spark loader's state. ``replace_file`` replaces a small
file so that a crash leaves the old or the new one, never a torn one (the
checkpoints, the Spark loader's state)."""

import os


def sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` atomically and durably: written under a
    temporary name, fsync'ed, renamed, its directory fsync'ed. Blocking; raises OSError."""
    temporary = path + ".tmp"
    try:  # a fresh file, never one a crash may have left linked under another name
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)
    sync_directory(os.path.dirname(path))
