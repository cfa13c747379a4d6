"""The start-up check of file descriptors against ``RLIMIT_NOFILE``.

A worker keeps every segment file of its partitions open; the acceptor keeps one
descriptor per client connection (up to ``max.connections``) and opens the segment
files it reads from. Found out at run time, a missing descriptor is a worker that
cannot open its logs or a connection refused; found out here, before anything is
forked, it is one line saying how many descriptors the logs need and what to do.

The count is the segment files under ``log.dir`` now, per owning worker
(``ownership.owner_slot``), plus the descriptors every child inherits from the
supervisor (rings, channels) and a margin for the process's own (epoll, logs, pipes).
"""

import os
from typing import NamedTuple

from mpbroker.ownership import owner_slot
from mpbroker.segments.naming import parse_partition_dir, parse_segment_file_name

MARGIN = 64
ADVICE = ("raise the limit (LimitNOFILE= in the systemd unit, ulimit -n in a shell) "
          "or keep fewer, larger segments (log.file.size, log.retention.hours, log.retention.size)")


class SegmentCount(NamedTuple):
    partitions: int
    segments: int


def count_segments(log_dir: str, num_workers: int) -> list:
    """A ``SegmentCount`` per worker slot: the partitions it owns under ``log_dir`` and
    their segment files."""
    partitions = [0] * num_workers
    segments = [0] * num_workers
    with os.scandir(log_dir) as entries:
        for entry in entries:
            name = parse_partition_dir(entry.name)
            if name is None or not entry.is_dir(follow_symlinks=False):
                continue
            slot = owner_slot(name[0], name[1], num_workers)
            partitions[slot] += 1
            segments[slot] += sum(1 for file_name in os.listdir(entry.path)
                                  if parse_segment_file_name(file_name) is not None)
    return [SegmentCount(p, s) for p, s in zip(partitions, segments)]


def check(log_dir: str, num_workers: int, max_connections: int, limit: int, inherited: int):
    """``(refusal, warning)``, each a sentence or None: a refusal when a worker would need
    more than ``limit`` descriptors for its segment files, a warning when the acceptor
    could (``max.connections`` clients and every segment file)."""
    counts = count_segments(log_dir, num_workers)
    base = inherited + MARGIN
    slot, worst = max(enumerate(counts), key=lambda item: item[1].segments)
    if worst.segments + base > limit:
        partitions = f"{worst.partitions} partition{'s' if worst.partitions != 1 else ''}"
        return (f"worker {slot} needs about {worst.segments + base} file descriptors, more than the limit of "
                f"{limit} (RLIMIT_NOFILE): it keeps the {worst.segments} segment files of its {partitions} "
                f"in log.dir {log_dir} open, plus {base} for the process; {ADVICE}"), None
    total = sum(count.segments for count in counts)
    if max_connections + total + base > limit:
        return None, (f"the acceptor may need {max_connections + total + base} file descriptors "
                      f"(max.connections={max_connections}, {total} segment files to read from, {base} for the "
                      f"process), more than the limit of {limit} (RLIMIT_NOFILE): past it, new connections are "
                      f"closed; {ADVICE}, or lower max.connections")
    return None, None
