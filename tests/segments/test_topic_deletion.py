"""The crash-safe deletion of a topic's data (``segments.topic_deletion``): the mark, the
rename out of the way, and ``finish_pending``, the start-up step that finishes what a
crash interrupted, from every state a crash can leave."""

import os

import pytest

from mpbroker.segments import LogConfig, LogManager, topic_configs, topic_deletion
from mpbroker.segments.naming import partition_dir_name


def make_topic(log_dir, topic: str, partitions: int) -> None:
    logs = LogManager(str(log_dir), lambda _: LogConfig())
    for partition in range(partitions):
        logs.get_or_create(topic, partition).append(b"\x00" * 30, 1)
    logs.close()


def names(log_dir) -> list:
    return sorted(os.listdir(log_dir))


@pytest.fixture
def log_dir(tmp_path):
    make_topic(tmp_path, "doomed", 3)
    make_topic(tmp_path, "kept", 2)
    make_topic(tmp_path, "doomed-1", 1)  # its directory looks like partition 1 of "doomed"... and is not
    topic_configs.write(str(tmp_path), "doomed", 3, {"retention.ms": "1000"})
    topic_configs.write(str(tmp_path), "kept", 2, {})
    return tmp_path


KEPT = ["doomed-1-0", "kept-0", "kept-1"]


def test_marks_are_durable_files_listed_by_topic(tmp_path):
    assert topic_deletion.marked(str(tmp_path)) == []
    topic_deletion.mark(str(tmp_path), "b")
    topic_deletion.mark(str(tmp_path), "a")
    topic_deletion.mark(str(tmp_path), "a")
    assert topic_deletion.marked(str(tmp_path)) == ["a", "b"]
    topic_deletion.unmark(str(tmp_path), "a")
    topic_deletion.unmark(str(tmp_path), "a")
    assert topic_deletion.marked(str(tmp_path)) == ["b"]
    with pytest.raises(Exception):
        topic_deletion.mark(str(tmp_path), "../etc")


def test_nothing_pending_changes_nothing(log_dir):
    before = names(log_dir)
    assert topic_deletion.finish_pending(str(log_dir)) == []
    assert names(log_dir) == before


def test_a_crash_after_the_mark_deletes_every_partition(log_dir):
    topic_deletion.mark(str(log_dir), "doomed")
    assert topic_deletion.finish_pending(str(log_dir)) == ["doomed"]
    assert [name for name in names(log_dir) if name.endswith(("-0", "-1", "-2"))] == KEPT
    assert not os.path.exists(topic_configs.path(str(log_dir), "doomed"))
    assert os.path.exists(topic_configs.path(str(log_dir), "kept"))
    assert topic_deletion.marked(str(log_dir)) == []


def test_a_crash_between_a_rename_and_its_removal(log_dir):
    """One partition renamed and half emptied, one renamed whole, one not renamed yet."""
    topic_deletion.mark(str(log_dir), "doomed")
    for partition, empty_some in ((0, True), (1, False)):
        directory = os.path.join(log_dir, partition_dir_name("doomed", partition))
        retired = f"{directory}.{'0' * 31}{partition}-delete"
        os.rename(directory, retired)
        if empty_some:
            os.unlink(os.path.join(retired, sorted(os.listdir(retired))[0]))
    assert topic_deletion.retired_partition(os.path.basename(retired)) == ("doomed", 1)
    assert topic_deletion.finish_pending(str(log_dir)) == ["doomed"]
    assert not [name for name in names(log_dir) if name.startswith("doomed-") and name not in KEPT]
    assert all(os.listdir(os.path.join(log_dir, name)) for name in KEPT)  # untouched
    assert topic_deletion.marked(str(log_dir)) == []


def test_a_crash_after_the_last_removal_leaves_only_the_settings_and_mark(log_dir):
    topic_deletion.mark(str(log_dir), "doomed")
    for partition in range(3):
        topic_deletion.remove_partition_directory(os.path.join(log_dir, partition_dir_name("doomed", partition)))
    assert os.path.exists(topic_configs.path(str(log_dir), "doomed"))
    assert topic_deletion.finish_pending(str(log_dir)) == ["doomed"]
    assert not os.path.exists(topic_configs.path(str(log_dir), "doomed"))
    assert topic_deletion.marked(str(log_dir)) == []


def test_a_renamed_directory_without_a_mark_goes_too(log_dir):
    """(A partition deleted whose topic's mark went already: nothing of it may come back.)"""
    directory = os.path.join(log_dir, partition_dir_name("doomed", 2))
    os.rename(directory, directory + "." + "f" * 32 + "-delete")
    assert topic_deletion.finish_pending(str(log_dir)) == []
    assert "doomed-2" not in names(log_dir) and not [name for name in names(log_dir) if name.endswith("-delete")]
    assert {"doomed-0", "doomed-1"} <= set(names(log_dir))


def test_the_log_manager_opens_nothing_renamed_for_deletion(log_dir):
    directory = os.path.join(log_dir, partition_dir_name("doomed", 0))
    os.rename(directory, directory + "." + "e" * 32 + "-delete")
    logs = LogManager(str(log_dir), lambda _: LogConfig())
    opened = {(found.topic, found.partition) for found in logs.open_existing(recover=True)}
    logs.close()
    assert ("doomed", 0) not in opened and ("doomed", 1) in opened
