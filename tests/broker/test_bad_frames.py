"""Malformed and hostile frames: the offending connection is closed, the broker and
its other clients go on, nothing is written, and the log says what happened."""

import os
import socket
import struct
import time

import pytest

from mpbroker.codec import requests as rq
from mpbroker.codec.message import encode_message_set

from .wire import WireClient

GOOD_SET = encode_message_set([b"good"])


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


BAD_FRAMES = {
    "negative size": struct.pack(">i", -1) + b"\x00" * 10,
    "zero size": struct.pack(">i", 0),
    "size over max.socket.request.bytes": struct.pack(">i", 2_000_000) + b"\x00" * 100,
    "unknown request type": frame(struct.pack(">h", 42) + b"\x00" * 20),
    "type only": frame(struct.pack(">h", 1)),
    "truncated fetch": frame(rq.encode_fetch("t", 0, 0, 100)[4:-3]),
    "negative topic length": frame(struct.pack(">hh", 1, -1) + b"\x00" * 16),
    "set size past the end": frame(struct.pack(">hh", 0, 1) + b"t" + struct.pack(">ii", 0, 1000) + b"\x00" * 10),
    "negative multifetch count": frame(struct.pack(">hh", 2, -3)),
    "trailing bytes": frame(rq.encode_fetch("t", 0, 0, 100)[4:] + b"junk"),
    "bad durability": frame(struct.pack(">hh", 100, 7) + rq.encode_produce("t", 0, GOOD_SET)[6:]),
    "random bytes after a plausible size": struct.pack(">i", 100) + bytes(range(3, 103)),
}


@pytest.fixture
def small_broker(broker_factory):
    return broker_factory(max_socket_request_bytes=1_000_000)


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_its_connection(small_broker, name):
    with WireClient(small_broker.port) as bystander:
        assert bystander.produce_acked("t", 0, GOOD_SET).error == 0
        with WireClient(small_broker.port) as attacker:
            attacker.send(BAD_FRAMES[name])
            assert attacker.closed_by_broker(), f"{name}: connection left open"
        assert bystander.produce_acked("t", 0, GOOD_SET).next_offset == 2 * len(GOOD_SET)
        assert bystander.fetch("t", 0, 0) == (0, GOOD_SET * 2)
    assert "closing connection" in small_broker.output()


def test_nothing_of_a_refused_produce_reaches_the_log(small_broker):
    bad = bytearray(GOOD_SET)
    bad[-1] ^= 0xFF
    with WireClient(small_broker.port) as client:
        client.send(rq.encode_multiproduce([("mp", 0, GOOD_SET), ("mp", 7, GOOD_SET)]))  # partition 7 is out of range
        assert client.closed_by_broker()
    with WireClient(small_broker.port) as client:
        assert client.produce_acked("mp", 0, bytes(bad)).error == 2
        assert client.offsets("mp", 0, -1) == (0, [0])
        assert client.fetch("mp", 0, 0) == (0, b"")
    assert not os.path.exists(os.path.join(small_broker.log_dir, "mp-0")) or \
        os.path.getsize(os.path.join(small_broker.log_dir, "mp-0", "0" * 20 + ".kafka")) == 0


def test_a_stalled_half_frame_does_not_block_others(small_broker):
    staller = socket.create_connection(("127.0.0.1", small_broker.port))
    staller.sendall(struct.pack(">i", 900_000) + b"\x00\x00" + b"x" * 1000)  # promises 900 KB, sends 1 KB
    with WireClient(small_broker.port) as client:
        for _ in range(20):
            assert client.produce_acked("busy", 1, GOOD_SET, durability=0).error == 0
    staller.close()


def test_connection_limit(broker_factory):
    broker = broker_factory(max_connections=3)
    clients = [WireClient(broker.port) for _ in range(3)]
    for client in clients:
        assert client.fetch("t", 0, 0) == (0, b"")
    with WireClient(broker.port) as extra:
        assert extra.closed_by_broker()
    clients[0].close()
    deadline = time.monotonic() + 5  # a slot frees once the acceptor has seen the close
    while True:
        try:
            with WireClient(broker.port) as later:
                assert later.fetch("t", 0, 0) == (0, b"")
            break
        except ConnectionError:
            assert time.monotonic() < deadline, "no connection slot came free"
            time.sleep(0.05)
    for client in clients[1:]:
        client.close()
    assert "max.connections (3) reached" in broker.output()
