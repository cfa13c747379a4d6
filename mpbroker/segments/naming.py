"""Names on disk: partition directories and segment file names.

A partition's directory is ``<topic>-<partition>`` with the topic held to the codec's
topic rule (``mpbroker.codec.topic_names``); every path built here stays inside
``log.dir``.
"""

import os
import re

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic

SEGMENT_SUFFIX = ".kafka"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"  # a replicated partition's epochs (leader_epochs)
# Present in the directory of a partition whose log holds modern record batches (magic 2)
# instead of 0.7 messages; written before its first segment, never removed.
RECORD_BATCHES_FILE = "record-batches"
_SEGMENT_RE = re.compile(r"(\d{20})\.kafka\Z")
_PARTITION_DIR_RE = re.compile(r"([A-Za-z0-9._-]{1,249})-(\d{1,10})\Z")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{check_topic(topic)}-{int(partition)}"


def parse_partition_dir(name: str):
    """``(topic, partition)`` for a directory name like ``clicks-3``, or None."""
    match = _PARTITION_DIR_RE.match(name)
    if not match or match.group(1) in (".", ".."):
        return None
    return match.group(1), int(match.group(2))


def partition_path(log_dir: str, topic: str, partition: int) -> str:
    """Path of a partition's directory, guaranteed to be a direct child of ``log_dir``."""
    root = os.path.realpath(log_dir)
    path = os.path.join(root, partition_dir_name(topic, partition))
    if os.path.dirname(path) != root:  # unreachable with a checked name; kept as a guard
        raise InvalidTopicError(f"topic {topic!r} would leave log.dir")
    return path


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str):
    """The base offset of a segment file name, or None for anything else."""
    match = _SEGMENT_RE.match(name)
    return int(match.group(1)) if match else None


def list_segment_bases(directory: str) -> list:
    """Sorted base offsets of the segment files in a partition directory."""
    bases = []
    for name in os.listdir(directory):
        base = parse_segment_file_name(name)
        if base is not None:
            bases.append(base)
    bases.sort()
    return bases
