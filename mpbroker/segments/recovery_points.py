"""The recovery-point checkpoint: for each partition a worker owns, the end of what a
completed flush made durable, kept in ``log.dir`` so that recovery after a crash or a
power cut scans only what lies past it (``recovery``), not whole segments.

One file per worker slot, ``recovery-point-offset-checkpoint.worker<slot>of<num.workers>``
(a name that no ``<topic>-<partition>`` directory can have):
a worker owns a fixed set of partitions for a given ``num.workers`` and is its file's
only writer, and a file made under another ``num.workers`` is not read (its partitions
are owned differently; recovery then falls back to scanning last segments once). The
text is Kafka 0.8's checkpoint format: a version line ``0``, a count line, then one
``topic partition offset`` line per partition (topic names have no blanks); an
offset of -1 says the recovery point is not known yet. The file is replaced
atomically (written under a temporary name, fsync'ed, renamed, ``log.dir`` fsync'ed),
so a crash leaves the old or the new one, never a torn one; a file that does not parse
is reported and ignored.

A partition missing from a worker's file was created after the file was last written
(the worker lists every partition it has, and writes its first file before it takes
its first produce), so everything in it is past the checkpoint.
"""

import logging
import os
import re

from mpbroker.segments.durability import replace_file

log = logging.getLogger(__name__)

PREFIX = "recovery-point-offset-checkpoint"
VERSION = 0
UNKNOWN = -1
_NAME = re.compile(re.escape(PREFIX) + r"\.worker(\d+)of(\d+)\Z")


def stored(point: int | None) -> int:
    """A log's recovery point as the checkpoint (and the partition table) stores it:
    None, not known, is UNKNOWN."""
    return UNKNOWN if point is None else point


def checkpoint_path(log_dir: str, slot: int, workers: int) -> str:
    return os.path.join(log_dir, f"{PREFIX}.worker{slot}of{workers}")


def write_checkpoint(path: str, points: dict) -> None:
    """Replace the checkpoint at ``path`` with ``{(topic, partition): offset}`` durably.
    Blocking (two fsyncs); raises OSError."""
    lines = [str(VERSION), str(len(points))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(points.items())]
    replace_file(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_checkpoint(path: str):
    """``{(topic, partition): offset}`` from the checkpoint at ``path``, or None when
    there is none or it cannot be read (with a warning: recovery then scans more)."""
    try:
        with open(path, encoding="ascii") as file:
            text = file.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read the recovery points in %s (%s); recovering without them", path, exc)
        return None
    try:
        return parse_checkpoint(text)
    except ValueError as exc:
        log.warning("ignoring the recovery points in %s: %s", path, exc)
        return None


def parse_checkpoint(text: str) -> dict:
    lines = text.splitlines()
    if len(lines) < 2 or lines[0] != str(VERSION):
        raise ValueError(f"not a version {VERSION} checkpoint")
    count = int(lines[1])
    entries = lines[2:]
    if count != len(entries):
        raise ValueError(f"{len(entries)} entries where the header says {count}")
    points = {}
    for line in entries:
        topic, partition, offset = line.split(" ")
        if int(offset) < UNKNOWN:
            raise ValueError(f"bad offset in {line!r}")
        points[(topic, int(partition))] = int(offset)
    return points


def is_checkpoint_file(name: str) -> bool:
    """A checkpoint's name in ``log.dir`` (or its temporary one while it is written)."""
    return _NAME.match(name.removesuffix(".tmp")) is not None


def remove_other_layouts(log_dir: str, workers: int) -> None:
    """Delete checkpoints written under another ``num.workers`` (never read again)."""
    for name in os.listdir(log_dir):
        match = _NAME.match(name)
        if match and int(match.group(2)) != workers:
            try:
                os.unlink(os.path.join(log_dir, name))
            except FileNotFoundError:
                pass
