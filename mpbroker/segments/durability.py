"""Making a directory's entries durable: a created, renamed or deleted name survives a
power cut only once the directory itself is fsync'ed. Shared by the log, the
clean-shutdown marker and the Spark loader's state."""

import os


def sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
