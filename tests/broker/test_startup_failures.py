"""Starts that cannot succeed: each ends with exit code 1 and one ``cannot start: ...``
line saying what is wrong (no traceback), and leaves the clean-shutdown marker where it
was, so the start after the repair skips recovery. Covers an unusable ``log.dir``
(read-only file system, a file in its place, a lock file or marker that is not a file),
a taken port, and too few file descriptors for the segment files
(``mpbroker/descriptor_budget.py``)."""

import contextlib
import os
import resource
import socket
import subprocess
import sys

import pytest

from mpbroker.codec.message import encode_message_set
from mpbroker.ownership import owner_slot
from mpbroker.segments.clean_shutdown import MARKER_NAME
from mpbroker.segments.naming import segment_file_name

from .wire import WireClient


def serve(broker, file_limit: int | None = None) -> subprocess.CompletedProcess:
    """``mpbroker serve`` on the broker's configuration, expected to stop by itself."""
    def limit_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (file_limit, file_limit))

    return subprocess.run([sys.executable, "-m", "mpbroker", "serve", broker.config_path],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=limit_files if file_limit else None)


def assert_refused_in_one_line(result: subprocess.CompletedProcess, *parts: str) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "cannot start: " in line]
    assert len(lines) == 1, result.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def last_start(output: str) -> str:
    """The log of the last start only (a broker's log file is appended to)."""
    return output[output.rindex("starting:"):]


def stop_cleanly(broker) -> None:
    with WireClient(broker.port) as client:
        client.produce_acked("kept", 0, encode_message_set([b"kept"]), durability=0)
    assert broker.stop() == 0
    assert os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))


@contextlib.contextmanager
def tmpfs(path: str):
    """A small tmpfs mounted at ``path`` (root only); yields a function that remounts it read-only."""
    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", path], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield lambda: subprocess.run(["mount", "-o", "remount,ro", path], check=True)
    finally:
        subprocess.run(["umount", "-l", path], check=False)


# --- log.dir ---------------------------------------------------------------------

def test_a_read_only_log_dir_is_refused_in_one_line(broker_factory):
    broker = broker_factory(start=False)
    with tmpfs(broker.log_dir) as remount_read_only:
        broker.start()
        stop_cleanly(broker)
        remount_read_only()
        result = serve(broker)
        assert_refused_in_one_line(result, f"log.dir {broker.log_dir}", "read-only file system")


def make_log_dir_a_file(broker):
    os.rmdir(broker.log_dir)
    with open(broker.log_dir, "w") as f:
        f.write("not a directory\n")


def make_the_lock_a_directory(broker):
    os.makedirs(os.path.join(broker.log_dir, ".lock"))


def make_the_marker_a_directory(broker):
    os.makedirs(os.path.join(broker.log_dir, MARKER_NAME))


@pytest.mark.parametrize("damage, parts", [
    (make_log_dir_a_file, ["is not a directory"]),
    (make_the_lock_a_directory, [".lock", "Is a directory"]),
    (make_the_marker_a_directory, ["clean-shutdown marker", "Is a directory"]),
], ids=["log.dir is a file", "the lock file is a directory", "the marker is a directory"])
def test_an_unusable_log_dir_is_refused_in_one_line(broker_factory, damage, parts):
    broker = broker_factory(start=False)
    os.makedirs(broker.log_dir, exist_ok=True)
    damage(broker)
    assert_refused_in_one_line(serve(broker), f"log.dir {broker.log_dir}", *parts)


def test_a_taken_kafka_port_is_refused_in_one_line(broker_factory):
    broker = broker_factory(start=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        broker.properties["kafka.port"] = str(taken.getsockname()[1])
        broker.write_config()
        assert_refused_in_one_line(serve(broker), f"cannot listen on 127.0.0.1:{taken.getsockname()[1]} (kafka.port)")


def test_kafka_port_minus_one_turns_the_modern_listener_off(broker_factory):
    broker = broker_factory(kafka_port=-1)
    status = broker.status()
    assert status["kafka_port"] is None and status["kafka"] is None
    assert "modern Kafka protocol" not in broker.output()


# --- the clean-shutdown marker survives a failed start ----------------------------

def test_a_start_on_a_taken_port_keeps_the_clean_shutdown_marker(broker):
    stop_cleanly(broker)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        broker.properties["port"] = str(taken.getsockname()[1])
        broker.write_config()
        assert_refused_in_one_line(serve(broker), f"cannot listen on 127.0.0.1:{taken.getsockname()[1]} (port)")
    assert os.path.exists(os.path.join(broker.log_dir, MARKER_NAME))
    broker.properties["port"] = "0"
    broker.write_config()
    broker.start()
    assert "clean shutdown last time" in last_start(broker.output())
    with WireClient(broker.port) as client:
        assert client.fetch("kept", 0, 0) == (0, encode_message_set([b"kept"]))


# --- file descriptors ------------------------------------------------------------

FILE_LIMIT = 256


def test_too_few_file_descriptors_for_the_segment_files_are_refused(broker_factory):
    broker = broker_factory(start=False)
    directory = os.path.join(broker.log_dir, "wide-0")
    os.makedirs(directory)
    message_set = encode_message_set([b"one segment"])
    for n in range(FILE_LIMIT):  # a valid log of FILE_LIMIT segments: only the descriptors are short
        with open(os.path.join(directory, segment_file_name(n * len(message_set))), "wb") as f:
            f.write(message_set)
    slot = owner_slot("wide", 0, 2)
    assert_refused_in_one_line(serve(broker, file_limit=FILE_LIMIT),
                               f"worker {slot} needs about", f"limit of {FILE_LIMIT} (RLIMIT_NOFILE)",
                               f"{FILE_LIMIT} segment files of its 1 partition in log.dir {broker.log_dir}",
                               "LimitNOFILE", "ulimit -n")


def test_max_connections_beyond_the_file_limit_is_warned_about(broker_factory):
    broker = broker_factory(start=False, max_connections=10000)
    with open(broker.output_path, "a") as output:
        broker.process = subprocess.Popen(
            [sys.executable, "-m", "mpbroker", "serve", broker.config_path], stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT)))
    broker.wait_until(lambda s: s["acceptor"]["state"] == "up", what="the broker up")
    assert broker.stop() == 0
    warning = next((line for line in broker.output().splitlines() if "the acceptor may need" in line), None)
    assert warning is not None, broker.output()
    assert "max.connections=10000" in warning and f"limit of {FILE_LIMIT}" in warning and "WARNING" in warning
