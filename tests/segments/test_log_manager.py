"""The logs under one log.dir: hostile topic names, ownership, reopening with and
without the clean-shutdown marker, and full disks."""

import os
import subprocess
import sys
import textwrap

import pytest

from mpbroker.codec.errors import InvalidTopicError, StorageError
from mpbroker.codec.message_set import validate_message_set
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments import LogConfig, LogManager
from mpbroker.segments.clean_shutdown import take_marker, write_marker
from mpbroker.segments.naming import parse_partition_dir

from .conftest import message_set

HOSTILE_TOPICS = [
    "../x", "..", ".", "a/b", "/etc", "a\\b", "a b", "a\x00b", "tab\t", "new\nline",
    "", "x" * 256, "ünïcode", "semi;colon", "*",
]


@pytest.mark.parametrize("topic", HOSTILE_TOPICS)
def test_hostile_topic_names_are_refused_and_create_nothing(tmp_path, topic):
    log_dir = tmp_path / "logs"
    manager = LogManager(str(log_dir))
    with pytest.raises(InvalidTopicError, match="illegal topic name|not ASCII"):
        manager.get_or_create(topic, 0)
    assert os.listdir(log_dir) == []
    assert os.listdir(tmp_path) == ["logs"]


@pytest.mark.parametrize("topic", ["a", "page-views", "a.b_c-D9", "x" * 249, "..."])
def test_legal_topic_names(topic):
    assert check_topic(topic) == topic
    assert check_topic(topic.encode()) == topic


def test_partition_directory_names_round_trip():
    assert parse_partition_dir("page-views-12") == ("page-views", 12)
    assert parse_partition_dir("lost+found") is None
    assert parse_partition_dir("..-1") is None
    assert parse_partition_dir("topic") is None


def test_reopen_finds_owned_logs_only(tmp_path):
    manager = LogManager(str(tmp_path))
    for topic in ("a", "b"):
        for partition in range(3):
            manager.get_or_create(topic, partition).append(message_set(2), 2)
    manager.close()
    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    owner = LogManager(str(tmp_path), owns=lambda topic, partition: partition % 2 == 0)
    opened = owner.open_existing(recover=True)
    assert sorted((log.topic, log.partition) for log in opened) == [("a", 0), ("a", 2), ("b", 0), ("b", 2)]
    assert all(log.log_end == len(message_set(2)) for log in opened)
    with pytest.raises(ValueError, match="not owned"):
        owner.get_or_create("a", 1)
    owner.close()


def test_clean_marker_skips_recovery(tmp_path):
    manager = LogManager(str(tmp_path))
    log = manager.get_or_create("t", 0)
    log.append(message_set(3), 3)
    manager.close()
    write_marker(str(tmp_path))
    segment = tmp_path / "t-0" / ("0" * 20 + ".kafka")
    with open(segment, "ab") as f:
        f.write(b"\x00\x01")  # a tail a clean shutdown would never leave
    assert take_marker(str(tmp_path)) is True
    assert take_marker(str(tmp_path)) is False
    trusted = LogManager(str(tmp_path))
    assert trusted.open_existing(recover=False)[0].log_end == len(message_set(3)) + 2
    trusted.close()
    recovered = LogManager(str(tmp_path))
    assert recovered.open_existing(recover=True)[0].log_end == len(message_set(3))
    recovered.close()


def test_reconfigure_and_flush_scheduling(tmp_path):
    now = [0]
    manager = LogManager(str(tmp_path), lambda topic: LogConfig(flush_interval_ms=1000), timer_ms=lambda: now[0])
    log = manager.get_or_create("t", 0)
    log.append(message_set(1), 1)
    now[0] = 500
    assert manager.logs_due_for_flush() == []
    manager.reconfigure(lambda topic: LogConfig(flush_interval_ms=100))
    assert manager.logs_due_for_flush() == [log]
    manager.close()


ENOSPC_SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    from mpbroker.codec.errors import StorageError
    from mpbroker.segments import LogManager
    from mpbroker.codec.message import encode_message_set
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
    log = LogManager(sys.argv[1]).get_or_create("full", 0)
    chunk = encode_message_set([b"x" * 990] * 7)  # 7,000 bytes: the 8th set crosses the limit
    accepted = 0
    try:
        for _ in range(100):
            log.append(chunk, 7)
            accepted += 1
    except StorageError as exc:
        print(accepted, log.log_end, exc)
    """
)


def test_a_full_disk_fails_the_append_and_leaves_the_log_whole(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", ENOSPC_SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True
    )
    accepted, log_end, message = result.stdout.split(" ", 2)
    assert int(accepted) == 7 and int(log_end) == 7 * 7000
    assert "nothing was written" in message
    segment = tmp_path / "full-0" / ("0" * 20 + ".kafka")
    assert os.path.getsize(segment) == 49_000  # the partial write was undone
    manager = LogManager(str(tmp_path))
    log = manager.open_existing(recover=True)[0]
    assert log.log_end == 49_000
    assert validate_message_set(log.read_bytes(0, 1 << 20)).messages == 49


@pytest.fixture
def tiny_filesystem(tmp_path):
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_really_full_filesystem_then_space_returns(tiny_filesystem):
    manager = LogManager(str(tiny_filesystem / "logs"))
    log = manager.get_or_create("t", 0)
    chunk = message_set(50, size=990)
    with pytest.raises(StorageError, match="disk full"):
        for _ in range(1000):
            log.append(chunk, 50)
    end = log.log_end
    assert end > 0 and end % len(chunk) == 0
    assert os.path.getsize(log._segments[0].path) == end
    # The log is all there is to free: retention makes room.
    log.config = LogConfig(retention_bytes=1, segment_bytes=len(chunk) * 4)
    log.roll()
    log.apply_retention()
    assert log.append(chunk, 50) == end  # space returned: appends continue at the same end
    manager.close()
