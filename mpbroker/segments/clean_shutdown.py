"""The clean-shutdown marker of a log directory.

A broker that stopped gracefully (every log flushed and closed) leaves the marker
file in ``log.dir``; the next start takes it away and skips recovery. Without it, every
partition's last segment is scanned and its torn tail truncated.
"""

import os

from mpbroker.segments.durability import sync_directory

MARKER_NAME = ".kafka_cleanshutdown"


def write_marker(log_dir: str) -> None:
    """Record, durably, that every log under ``log_dir`` was flushed and closed."""
    path = os.path.join(log_dir, MARKER_NAME)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_directory(log_dir)


def take_marker(log_dir: str) -> bool:
    """Remove the marker; True if it was there (the last shutdown was clean)."""
    path = os.path.join(log_dir, MARKER_NAME)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    sync_directory(log_dir)
    return True
