"""Deleting a topic's data from ``log.dir`` so that no crash can bring it back.

    <log.dir>/delete-topics/<topic>                  the deletion is decided (an empty file)
    <log.dir>/<topic>-<partition>.<32 hex>-delete    a partition directory on its way out

The commit point of a deletion is its marker: written and made durable (the file,
then its directory fsync'ed) before any partition is touched, removed last, once every
partition directory and the topic's settings (``topic_configs``) are gone. Each
partition directory is first renamed out of the way (Kafka's ``<dir>.<id>-delete``,
then ``log.dir`` fsync'ed), so that from that moment no recovery and no listing of
``log.dir`` takes it for a partition again, and only then removed with everything
in it. A crash anywhere leaves a marker, renamed directories, or both, and
``finish_pending`` (run by the supervisor before any worker opens a log) finishes the
job: every partition directory of a marked topic goes, every ``-delete`` directory
goes, then the settings and the marker. So old data never reappears after a restart,
and a topic made anew after the deletion starts empty.
"""

import logging
import os
import re
import shutil
import uuid

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments import topic_configs
from mpbroker.segments.durability import sync_directory
from mpbroker.segments.naming import parse_partition_dir

log = logging.getLogger(__name__)

DIRECTORY = "delete-topics"
_RETIRED_RE = re.compile(r"(.+)\.[0-9a-f]{32}-delete\Z")


def _marker(log_dir: str, topic: str) -> str:
    return os.path.join(log_dir, DIRECTORY, check_topic(topic))


def mark(log_dir: str, topic: str) -> None:
    """Record, durably, that ``topic`` is being deleted (OSError if it cannot be)."""
    directory = os.path.join(log_dir, DIRECTORY)
    try:
        os.mkdir(directory, 0o755)
        sync_directory(log_dir)
    except FileExistsError:
        pass
    fd = os.open(_marker(log_dir, topic), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_directory(directory)


def unmark(log_dir: str, topic: str) -> None:
    """The deletion of ``topic`` is complete: its marker goes (durably)."""
    try:
        os.unlink(_marker(log_dir, topic))
    except FileNotFoundError:
        return
    sync_directory(os.path.join(log_dir, DIRECTORY))


def marked(log_dir: str) -> list:
    """The topics whose deletion was decided and not finished, sorted."""
    try:
        names = os.listdir(os.path.join(log_dir, DIRECTORY))
    except FileNotFoundError:
        return []
    topics = []
    for name in names:
        try:
            topics.append(check_topic(name))
        except InvalidTopicError:
            continue
    return sorted(topics)


def retired_partition(name: str):
    """``(topic, partition)`` of a directory name renamed for deletion, or None."""
    match = _RETIRED_RE.match(name)
    return parse_partition_dir(match.group(1)) if match else None


def remove_partition_directory(directory: str) -> None:
    """Rename a partition directory out of the way (durably), then remove it with
    everything in it. Its files may still be open: whoever holds them reads on."""
    parent = os.path.dirname(directory)
    retired = f"{directory}.{uuid.uuid4().hex}-delete"
    os.rename(directory, retired)
    sync_directory(parent)
    remove_retired(retired)


def remove_retired(path: str) -> None:
    """Remove a renamed partition directory; what cannot go now is left for the next
    start (``finish_pending``), with a line saying so."""
    def failed(_function, where, error):
        log.warning("cannot remove %s now (%s); it goes at the next start", where, error[1])

    shutil.rmtree(path, onerror=failed)


def partition_directories(log_dir: str, topic: str, owns=None) -> list:
    """The partition directories of ``topic`` under ``log_dir`` (those ``owns``)."""
    found = []
    for name in sorted(os.listdir(log_dir)):
        parsed = parse_partition_dir(name)
        if parsed is not None and parsed[0] == topic and (owns is None or owns(*parsed)):
            path = os.path.join(log_dir, name)
            if os.path.isdir(path):
                found.append(path)
    return found


def retired_directories(log_dir: str, topic: str | None = None, owns=None) -> list:
    """The directories renamed for deletion (of ``topic`` alone, if given)."""
    found = []
    for name in sorted(os.listdir(log_dir)):
        parsed = retired_partition(name)
        if parsed is not None and (topic is None or parsed[0] == topic) and (owns is None or owns(*parsed)):
            found.append(os.path.join(log_dir, name))
    return found


def finish(log_dir: str, topic: str) -> None:
    """The last steps of a deletion, once no partition directory of ``topic`` is left:
    its settings, then its marker."""
    try:
        os.unlink(topic_configs.path(log_dir, topic))
        sync_directory(os.path.join(log_dir, topic_configs.DIRECTORY))
    except FileNotFoundError:
        pass
    unmark(log_dir, topic)


def finish_pending(log_dir: str) -> list:
    """Finish every deletion a crash interrupted (before any log is opened): the
    marked topics' partition directories, every directory renamed for deletion, then
    the marked topics' settings and markers. Returns the topics finished."""
    log_dir = os.path.realpath(log_dir)
    topics = marked(log_dir)
    for topic in topics:
        for directory in partition_directories(log_dir, topic):
            remove_partition_directory(directory)
    for retired in retired_directories(log_dir):
        remove_retired(retired)
    for topic in topics:
        finish(log_dir, topic)
        log.warning("finished the deletion of topic %s, which a stop interrupted", topic)
    return topics
