"""The modern groups' snapshot in shared memory (``ipc/group_snapshot.py``): what one
process publishes another reads whole, a snapshot too large is refused, a writer that
died mid-store leaves nothing readable until the next publish, and a reader racing a
writer never gets a torn copy."""

import time
import zlib

from mpbroker.ipc.group_snapshot import GroupSnapshot
from tests.ipc.forked import Child


def test_nothing_until_published_then_the_latest():
    snapshot = GroupSnapshot(4096)
    assert snapshot.read() is None
    assert snapshot.publish(b'{"groups": 1}', 1234)
    assert snapshot.read() == (b'{"groups": 1}', 1234)
    assert snapshot.publish(b"[]", 1300)
    assert snapshot.read() == (b"[]", 1300)


def test_too_large_is_refused_and_the_last_kept():
    snapshot = GroupSnapshot(64)
    assert snapshot.publish(b"x" * snapshot.capacity, 1)
    assert not snapshot.publish(b"y" * (snapshot.capacity + 1), 2)
    assert snapshot.read() == (b"x" * snapshot.capacity, 1)


def test_a_writer_dead_mid_store_leaves_nothing_until_the_next_publish():
    snapshot = GroupSnapshot(4096)
    snapshot.publish(b"old", 1)
    snapshot._words[0] |= 1  # as a writer killed between its stores leaves it
    assert snapshot.read() is None
    assert snapshot.publish(b"new", 2)
    assert snapshot.read() == (b"new", 2)


def test_another_process_reads_what_was_published():
    snapshot = GroupSnapshot(4096)
    writer = Child(lambda: snapshot.publish(b"from the child", 42))
    assert writer.result(timeout=10) is True
    assert snapshot.read() == (b"from the child", 42)


def _payload(number: int) -> bytes:
    body = bytes([number % 251]) * (1000 + number % 3000)
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_a_reader_racing_a_writer_never_gets_a_torn_copy():
    snapshot = GroupSnapshot(8192)
    snapshot.publish(_payload(0), 0)

    def write_for_a_while():
        deadline = time.monotonic() + 1.5
        number = 0
        while time.monotonic() < deadline:
            number += 1
            snapshot.publish(_payload(number), number)
        return number
    writer = Child(write_for_a_while)
    reads = 0
    try:
        while writer.alive():
            latest = snapshot.read()
            if latest is not None:
                data, _ = latest
                assert zlib.crc32(data[:-4]).to_bytes(4, "big") == data[-4:], "a torn copy"
                reads += 1
        assert writer.result(timeout=10) > 10
    finally:
        writer.kill()
    assert reads > 10
