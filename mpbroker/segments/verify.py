"""Offline check of partition logs: every message of every segment (length, magic,
CRC; a compressed wrapper's CRC covers its compressed bytes) and that the segments
are contiguous. Read-only, so it may run next to a broker (which may then show the
active segments' unflushed tails as torn). Recovery scans only the last segment;
this is how an operator looks for damage in the older ones.

    python -m mpbroker.segments.verify LOG_DIR [TOPIC-PARTITION ...]

One line per partition and one per problem; exit code 1 if any was found.
"""

import argparse
import mmap
import os
import sys
from typing import NamedTuple

from mpbroker.codec.message_set import validate_message_set
from mpbroker.segments.naming import list_segment_bases, parse_partition_dir, segment_file_name

_UNLIMITED = 1 << 62


class Problem(NamedTuple):
    file: str  # segment file name
    offset: int  # log offset of the first bad byte
    position: int  # its byte position in the file
    reason: str  # positions in it are file positions


class PartitionReport(NamedTuple):
    directory: str
    segments: int
    messages: int
    end: int  # log offset after the last segment
    problems: list


def verify_partition(directory: str) -> PartitionReport:
    """Check every segment of one partition directory."""
    problems = []
    messages = 0
    expected_base = None
    end = 0
    bases = list_segment_bases(directory)
    for base in bases:
        name = segment_file_name(base)
        if expected_base is not None and base != expected_base:
            problems.append(Problem(name, min(base, expected_base), 0,
                                    f"the previous segment ends at {expected_base}, this one starts at {base}"))
        try:
            valid, count, size, error = _scan(os.path.join(directory, name))
        except OSError as exc:
            problems.append(Problem(name, base, 0, f"cannot read it: {exc.strerror}"))
            expected_base = None
            continue
        messages += count
        if error is not None:
            problems.append(Problem(name, base + valid, valid, f"{error} (the rest of this file was not checked)"))
        expected_base = end = base + size
    return PartitionReport(directory, len(bases), messages, end, problems)


def _scan(path: str):
    """(valid bytes, messages in them, file size, first error or None) of one segment file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0, 0, None
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as view:
            result = validate_message_set(view, _UNLIMITED, deep=False)
    finally:
        os.close(fd)
    return result.valid_bytes, result.messages, size, result.error


def partition_directories(log_dir: str, names=()) -> list:
    """The partition directories of ``log_dir`` (only ``names`` if given), sorted."""
    chosen = set(names)
    found = []
    for name in sorted(os.listdir(log_dir)):
        path = os.path.join(log_dir, name)
        if parse_partition_dir(name) and os.path.isdir(path) and (not chosen or name in chosen):
            found.append(path)
    missing = chosen - {os.path.basename(path) for path in found}
    if missing:
        raise FileNotFoundError(f"no partition directory {', '.join(sorted(missing))} in {log_dir}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpbroker.segments.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("log_dir", help="the broker's log.dir")
    parser.add_argument("partitions", nargs="*", metavar="TOPIC-PARTITION", help="only these partitions")
    args = parser.parse_args(argv)
    try:
        directories = partition_directories(args.log_dir, args.partitions)
    except OSError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 2
    damaged = 0
    for directory in directories:
        report = verify_partition(directory)
        state = "DAMAGED" if report.problems else "ok"
        print(f"{os.path.basename(directory)}: {state}, {report.segments} segments, {report.messages} messages, "
              f"end {report.end}")
        for problem in report.problems:
            print(f"  {problem.file}, byte {problem.position} (log offset {problem.offset}): {problem.reason}")
        damaged += bool(report.problems)
    return 1 if damaged else 0


if __name__ == "__main__":
    sys.exit(main())
