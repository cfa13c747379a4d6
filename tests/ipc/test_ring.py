"""The shared-memory SPSC Ring: records, visibility, wrap-around padding, full/space wake-ups, reset, and a forked writer."""

import os
import random
import select
import struct
import time

import pytest

from mpbroker.ipc.ring import KIND_PAD, RECORD_HEADER_BYTES, Ring
from tests.ipc.forked import Child


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def eventfd_value(fd: int) -> int:
    try:
        return os.eventfd_read(fd)
    except BlockingIOError:
        return 0


def aligned_size(body: int) -> int:
    return (RECORD_HEADER_BYTES + body + 7) & ~7


def take(ring: Ring) -> list:
    """Read, copy and release everything published."""
    records = [(kind, bytes(body)) for kind, body in ring.read()]
    ring.release()
    return records


@pytest.fixture
def ring():
    ring = Ring(4096)
    ring.attach_writer()
    ring.attach_reader()
    yield ring
    os.close(ring.data_fd)
    os.close(ring.space_fd)


# --- construction -------------------------------------------------------------


@pytest.mark.parametrize("capacity", [0, 2048, 4095, 4097, 6144, 3 * 4096])
def test_capacity_must_be_a_power_of_two_of_at_least_4096(capacity):
    with pytest.raises(ValueError):
        Ring(capacity)


def test_new_ring_is_empty(ring):
    assert (ring.head, ring.tail, ring.used, ring.generation) == (0, 0, 0, 0)
    assert ring.free_bytes() == 4096
    assert ring.max_record_body == 4096 // 4 - RECORD_HEADER_BYTES
    assert ring.read() == []
    assert not readable(ring.data_fd)
    assert not readable(ring.space_fd)


# --- single process -------------------------------------------------------------


def test_write_publish_read_release_round_trip(ring):
    assert ring.try_write(5, b"hello", b" ", memoryview(b"world")) is True
    assert ring.publish() is True
    records = ring.read()
    assert [(kind, bytes(body)) for kind, body in records] == [(5, b"hello world")]
    assert ring.head == aligned_size(11) == 24
    assert ring.tail == 0  # not released yet
    assert ring.used == 24
    ring.release()
    assert ring.tail == 24
    assert ring.used == 0
    assert ring.read() == []


def test_records_are_invisible_until_publish(ring):
    assert ring.try_write(1, b"a")
    assert ring.try_write(2, b"bb")
    assert ring.head == 0
    assert ring.read() == []
    assert not readable(ring.data_fd)
    assert ring.free_bytes() == 4096 - 16 - 16  # the writer counts what it has written
    assert ring.publish() is True
    assert readable(ring.data_fd)
    assert take(ring) == [(1, b"a"), (2, b"bb")]


def test_publish_wakes_the_reader_once_per_publish(ring):
    assert ring.publish() is False  # nothing written: no wake-up
    assert not readable(ring.data_fd)
    for i in range(3):
        ring.try_write(1, b"x" * i)
    assert ring.publish() is True
    assert ring.publish() is False  # nothing new
    ring.try_write(1, b"y")
    assert ring.publish() is True
    assert eventfd_value(ring.data_fd) == 2
    Ring.clear_notification(ring.data_fd)  # no error when already zero
    assert not readable(ring.data_fd)
    assert [body for _, body in take(ring)] == [b"", b"x", b"xx", b"y"]


def test_read_returns_every_published_record_in_order_with_kind_and_body(ring):
    rng = random.Random(3)
    expected = []
    for i in range(40):
        body = rng.randbytes(rng.randrange(0, 90))
        kind = 1 + rng.randrange(1000)
        assert ring.try_write(kind, body)
        expected.append((kind, body))
        if i % 7 == 6:
            ring.publish()
    ring.publish()
    assert take(ring) == expected


def test_read_is_incremental_and_release_is_idempotent(ring):
    ring.try_write(1, b"first")
    ring.publish()
    first = ring.read()
    ring.try_write(2, b"second")
    ring.publish()
    assert [(k, bytes(b)) for k, b in ring.read()] == [(2, b"second")]  # not "first" again
    assert bytes(first[0][1]) == b"first"  # views stay valid until release
    ring.release()
    tail = ring.tail
    ring.release()
    assert ring.tail == tail == 2 * 16


def test_exact_fit_at_the_end_needs_no_padding(ring):
    for i in range(4):
        assert ring.try_write(1, bytes([i]) * ring.max_record_body)  # 1024 bytes each
    ring.publish()
    assert ring.head == 4096
    assert not ring.try_write(1, b"")  # full
    assert [body[0] for _, body in take(ring)] == [0, 1, 2, 3]
    assert ring.try_write(9, b"wrapped")  # starts at position 0, no padding
    ring.publish()
    assert ring.head == 4096 + 16
    assert take(ring) == [(9, b"wrapped")]


def test_padding_at_the_wrap_around(ring):
    # fill up to position 4072, leaving 24 bytes before the end
    for _ in range(3):
        assert ring.try_write(1, b"a" * 1016)  # 1024 bytes each
    assert ring.try_write(2, b"b" * 992)  # 1000 bytes
    ring.publish()
    assert ring.head == 4072
    assert ring.try_write(3, b"c" * 24) is False  # needs 24 padding + 32, only 24 free
    assert len(take(ring)) == 4
    assert ring.try_write(3, b"c" * 24) is True
    ring.publish()
    assert ring.head == 4072 + 24 + 32  # padding record, then the record at position 0
    assert take(ring) == [(3, b"c" * 24)]
    assert ring.tail == ring.head


def test_records_of_random_sizes_wrap_many_times(ring):
    rng = random.Random(12345)
    written = []
    received = []
    payload_bytes = 0
    sequence = 0
    while ring.head < 60 * ring.capacity:
        for _ in range(rng.randrange(1, 12)):
            size = rng.choice([0, 1, 7, 8, 9, rng.randrange(0, 200), rng.randrange(500, ring.max_record_body + 1),
                               ring.max_record_body])
            body = struct.pack("<I", sequence)[:size] + bytes([sequence & 0xFF]) * max(0, size - 4)
            kind = 1 + sequence % 250
            if not ring.try_write(kind, body):
                break
            written.append((kind, body))
            payload_bytes += aligned_size(len(body))
            sequence += 1
        ring.publish()
        received.extend(take(ring))
    assert received == written
    assert len(received) > 500
    assert ring.tail == ring.head
    assert ring.head > payload_bytes  # padding records were needed ...
    assert all(kind != KIND_PAD for kind, _ in received)  # ... and never handed out


def test_try_write_returns_false_when_full_and_true_after_release(ring):
    count = 0
    while ring.try_write(1, struct.pack("<I", count) + b"z" * 100):
        count += 1
    assert count == 4096 // aligned_size(104)
    assert ring.free_bytes() < aligned_size(104)
    assert ring.try_write(1, b"z" * 104) is False  # still full
    ring.publish()
    ring.read()
    assert ring.try_write(1, b"z" * 104) is False  # read but not released: still no room
    ring.release()
    assert ring.try_write(1, b"again") is True
    ring.publish()
    assert take(ring) == [(1, b"again")]


def test_space_eventfd_signals_a_waiting_writer_after_release(ring):
    while ring.try_write(1, b"q" * 500):
        pass
    ring.publish()
    assert not readable(ring.space_fd)
    records = ring.read()
    assert not readable(ring.space_fd)  # reading alone frees nothing
    assert len(records) == 4096 // aligned_size(500)
    ring.release()
    assert readable(ring.space_fd)
    assert eventfd_value(ring.space_fd) == 1
    assert ring.try_write(1, b"q" * 500)


def test_space_eventfd_stays_quiet_when_the_writer_was_not_waiting(ring):
    ring.try_write(1, b"data")
    ring.publish()
    take(ring)
    assert not readable(ring.space_fd)


def test_space_eventfd_is_signalled_once_per_wait(ring):
    while ring.try_write(1, b"w" * 1000):
        pass
    ring.publish()
    take(ring)
    assert eventfd_value(ring.space_fd) == 1
    # the writer is no longer waiting: a later release must not signal again
    assert ring.try_write(1, b"w")
    ring.publish()
    take(ring)
    assert not readable(ring.space_fd)


def test_record_body_over_the_limit_raises(ring):
    assert ring.try_write(1, b"m" * ring.max_record_body)
    with pytest.raises(ValueError):
        ring.try_write(1, b"m" * (ring.max_record_body + 1))
    with pytest.raises(ValueError):
        ring.try_write(1, b"m" * ring.max_record_body, b"!")  # the parts add up
    ring.publish()
    assert take(ring) == [(1, b"m" * ring.max_record_body)]


def test_reset_empties_the_ring_and_bumps_generation(ring):
    for i in range(5):
        ring.try_write(1, b"old%d" % i)
    ring.publish()
    ring.read()
    while ring.try_write(1, b"fill" * 100):
        pass
    assert ring.generation == 0
    ring.reset()
    assert ring.generation == 1
    assert (ring.head, ring.tail, ring.used) == (0, 0, 0)
    assert ring.free_bytes() == ring.capacity
    assert not readable(ring.data_fd)
    assert not readable(ring.space_fd)
    assert ring.read() == []
    assert ring.try_write(4, b"new")
    ring.publish()
    assert take(ring) == [(4, b"new")]
    ring.reset()
    assert ring.generation == 2


def test_attach_reader_with_discard_drops_published_records(ring):
    for i in range(10):
        ring.try_write(1, b"stale%d" % i)
    ring.publish()
    ring.attach_reader(discard=True)
    assert ring.read() == []
    assert ring.tail == ring.head
    assert ring.free_bytes() == ring.capacity
    ring.try_write(2, b"fresh")
    ring.publish()
    assert take(ring) == [(2, b"fresh")]


def test_attach_reader_without_discard_rereads_unreleased_records(ring):
    ring.try_write(1, b"one")
    ring.try_write(1, b"two")
    ring.publish()
    ring.read()  # read but never released: a reader that died
    ring.attach_reader()
    assert take(ring) == [(1, b"one"), (1, b"two")]


def test_attach_writer_drops_unpublished_records(ring):
    ring.try_write(1, b"published")
    ring.publish()
    ring.try_write(1, b"lost")  # written, never published: a writer that died
    ring.attach_writer()
    ring.try_write(2, b"respawned")
    ring.publish()
    assert take(ring) == [(1, b"published"), (2, b"respawned")]


# --- across processes -------------------------------------------------------------

RECORDS = 200_000
CROSS_CAPACITY = 64 * 1024


def record_kind(i: int) -> int:
    return 1 + i % 11


def record_parts(i: int, max_body: int) -> tuple:
    if i % 997 == 0:
        extra = max_body - 4 - (i // 997) % 9  # near and at the limit
    elif i % 31 == 0:
        extra = 1000 + i % 3000
    else:
        extra = (i * 7) % 61
    return struct.pack("<I", i), bytes([i & 0xFF]) * extra


def test_forked_writer_to_parent_reader_every_record_once_in_order_intact():
    ring = Ring(CROSS_CAPACITY)
    max_body = ring.max_record_body

    def writer():
        ring.attach_writer()
        waits = 0
        for i in range(RECORDS):
            parts = record_parts(i, max_body)
            while not ring.try_write(record_kind(i), *parts):
                ring.publish()  # let the reader see what is there before sleeping
                waits += 1
                if not select.select([ring.space_fd], [], [], 10.0)[0]:
                    raise AssertionError(f"writer waited 10 s for space at record {i}")
                Ring.clear_notification(ring.space_fd)
            if i % 64 == 0:
                ring.publish()
        ring.publish()
        return waits

    ring.attach_reader()
    child = Child(writer)
    try:
        expected = 0
        wakeups = 0
        deadline = time.monotonic() + 60
        while expected < RECORDS:
            assert time.monotonic() < deadline, f"reader stuck at record {expected}"
            if not select.select([ring.data_fd], [], [], 5.0)[0]:
                assert child.alive(), f"writer exited with records missing after {expected}"
                continue
            wakeups += 1
            Ring.clear_notification(ring.data_fd)
            for kind, body in ring.read():
                assert kind == record_kind(expected), f"record {expected}: kind {kind}"
                number, filler = record_parts(expected, max_body)
                assert len(body) == 4 + len(filler), f"record {expected}: length {len(body)}"
                assert body[:4] == number, f"expected record {expected}, got {struct.unpack('<I', body[:4])[0]}"
                assert body[4:] == filler, f"record {expected}: body corrupted"
                expected += 1
            ring.release()
            if wakeups % 10 == 0:
                time.sleep(0.001)  # a slow reader now and then, so the writer must block on space_fd
        waits = child.result(timeout=30)
        assert ring.read() == []  # nothing more than the N records
        assert ring.head == ring.tail
        assert waits >= 10  # the ring really filled up and the writer had to block, many times
        assert wakeups > 1
    finally:
        child.kill()
        os.close(ring.data_fd)
        os.close(ring.space_fd)
