"""Every request type against a real broker over real sockets, byte for byte
(PROTOCOL.md): produce (0.7 and acknowledged), fetch, multifetch, multiproduce,
OFFSETS, compression, and the error codes."""

import os
import struct
import time
import zlib

import pytest

from mpbroker.codec import compression
from mpbroker.codec import requests as rq
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from mpbroker.codec.message_set import iter_messages

from .wire import WireClient


def wait_for_fetch(client, topic, partition, offset, expected_length, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        error, data = client.fetch(topic, partition, offset)
        if error == 0 and len(data) >= expected_length:
            return data
        time.sleep(0.02)
    raise AssertionError(f"{topic}-{partition}@{offset}: no {expected_length} bytes after {timeout}s")


def test_acknowledged_produce_then_fetch_is_byte_exact(broker):
    message_set = encode_message_set([b"alpha", b"beta", b"gamma"])
    with WireClient(broker.port) as client:
        ack = client.produce_acked("clicks", 2, message_set, durability=1)
        assert (ack.error, ack.partition, ack.offset, ack.next_offset) == (0, 2, 0, len(message_set))
        # A flush ack means readable: fetch right away, raw frame checked byte by byte.
        raw = client.request(rq.encode_fetch("clicks", 2, 0, 1 << 20))
        assert raw == struct.pack(">h", 0) + message_set
        second = encode_message_set([b"delta"])
        ack2 = client.produce_acked("clicks", 2, second, durability=1)
        assert (ack2.offset, ack2.next_offset) == (len(message_set), len(message_set) + len(second))
        error, data = client.fetch("clicks", 2, ack2.offset)
        assert (error, data) == (0, second)


def test_append_ack_comes_before_the_flush(broker_factory):
    broker = broker_factory(log_default_flush_interval_ms=60_000, log_default_flush_scheduler_interval_ms=60_000)
    with WireClient(broker.port) as client:
        ack = client.produce_acked("slow", 0, encode_message_set([b"x"]), durability=0)
        assert ack.error == 0 and ack.next_offset > 0
        # Appended but not flushed: readers do not see it yet.
        assert client.fetch("slow", 0, 0) == (0, b"")
        assert client.offsets("slow", 0, -1) == (0, [0])
        flush_ack = client.produce_acked("slow", 0, encode_message_set([b"y"]), durability=1)
        error, data = client.fetch("slow", 0, 0)
        assert error == 0 and len(data) == flush_ack.next_offset


def test_an_empty_set_acknowledged_on_flush_is_answered_at_once(broker):
    """Nothing to flush: the ack must not wait for a flush that never comes (found by the fuzzer)."""
    with WireClient(broker.port) as client:
        client.produce_acked("empty", 0, encode_message_set([b"flushed first"]), durability=1)
        end = len(encode_message_set([b"flushed first"]))
        for durability in (1, 0):
            ack = client.produce_acked("empty", 0, b"", durability=durability)
            assert (ack.error, ack.offset, ack.next_offset) == (0, end, end)


def test_fire_and_forget_produce_becomes_visible(broker):
    with WireClient(broker.port) as client:
        client.produce("events", 1, [b"one", b"two"])
        data = wait_for_fetch(client, "events", 1, 0, 2 * 10 + 6)
        assert [p for _, p in iter_messages(data)] == [b"one", b"two"]


def test_fetch_edges_and_errors(broker):
    message_set = encode_message_set([b"only"])
    with WireClient(broker.port) as client:
        client.produce_acked("edges", 0, message_set)
        end = len(message_set)
        assert client.fetch("edges", 0, end) == (0, b"")  # exactly at the end: empty, no error
        assert client.fetch("edges", 0, end + 1)[0] == 1  # past the end: OffsetOutOfRange
        assert client.fetch("edges", 0, -5)[0] == 1
        assert client.fetch("edges", 0, 0, -1)[0] == 4  # InvalidFetchSize
        assert client.fetch("edges", 4, 0)[0] == 3  # partition outside [0, 4): WrongPartition
        assert client.fetch("edges", -1, 0)[0] == 3
        assert client.fetch("never-written", 0, 0) == (0, b"")  # unknown topic: empty, no error
        assert client.fetch("edges", 1, 0) == (0, b"")  # partition with no log yet
        assert client.fetch("edges", 0, 0, 7) == (0, message_set[:7])  # partial message: client drops it


def test_fetch_never_crosses_a_segment(broker_factory):
    broker = broker_factory(log_file_size=300)
    sets = [encode_message_set([bytes([65 + i]) * 100]) for i in range(5)]  # 110 bytes each
    with WireClient(broker.port) as client:
        offsets = [client.produce_acked("seg", 0, s).offset for s in sets]
        assert offsets == [0, 110, 220, 330, 440]
        # Segments: [0, 220), [220, 440), [440, 550)
        assert client.fetch("seg", 0, 0) == (0, sets[0] + sets[1])
        assert client.fetch("seg", 0, 220) == (0, sets[2] + sets[3])
        assert client.fetch("seg", 0, 330) == (0, sets[3])
        assert client.fetch("seg", 0, 440) == (0, sets[4])
    names = sorted(os.listdir(os.path.join(broker.log_dir, "seg-0")))
    assert names == ["00000000000000000000.kafka", "00000000000000000220.kafka", "00000000000000000440.kafka"]


def test_multifetch_answers_in_request_order(broker):
    a, b = encode_message_set([b"a1", b"a2"]), encode_message_set([b"b1"])
    with WireClient(broker.port) as client:
        client.produce_acked("mf", 0, a)
        client.produce_acked("mf", 3, b)
        raw = client.request(rq.encode_multifetch(
            [("mf", 3, 0, 100), ("mf", 0, 0, 100), ("mf", 9, 0, 100), ("none", 0, 0, 100), ("mf", 0, 999, 10)]))
        expected = struct.pack(">h", 0)
        for error, data in [(0, b), (0, a), (3, b""), (0, b""), (1, b"")]:
            expected += struct.pack(">ih", 2 + len(data), error) + data
        assert raw == expected


def test_multiproduce_spreads_over_partitions(broker):
    with WireClient(broker.port) as client:
        client.send(rq.encode_multiproduce(
            [("mp", partition, encode_message_set([b"p%d" % partition])) for partition in range(4)]))
        for partition in range(4):
            data = wait_for_fetch(client, "mp", partition, 0, 12)
            assert [p for _, p in iter_messages(data)] == [b"p%d" % partition]


def test_offsets_latest_earliest_and_before_a_time(broker_factory):
    broker = broker_factory(log_file_size=100)
    with WireClient(broker.port) as client:
        ends = [client.produce_acked("off", 1, encode_message_set([b"z" * 90])).next_offset for _ in range(3)]
        assert ends == [100, 200, 300]
        assert client.offsets("off", 1, -1, 1) == (0, [300])
        assert client.offsets("off", 1, -2, 1) == (0, [0])
        assert client.offsets("off", 1, -1, 10) == (0, [300, 200, 100, 0])
        now_ms = int(time.time() * 1000)
        assert client.offsets("off", 1, now_ms + 60_000, 2) == (0, [300, 200])
        assert client.offsets("off", 1, now_ms - 3_600_000, 10) == (0, [])
        assert client.offsets("nothing", 0, -1) == (0, [0])
        assert client.offsets("nothing", 0, -2) == (0, [0])
        assert client.offsets("nothing", 0, now_ms) == (0, [])
        assert client.offsets("off", 7, -1)[0] == 3


def test_random_partition(broker):
    chosen = set()
    with WireClient(broker.port) as client:
        for _ in range(40):
            ack = client.produce_acked("rand", -1, encode_message_set([b"r"]), durability=0)
            assert ack.error == 0 and 0 <= ack.partition < 4
            chosen.add(ack.partition)
    assert len(chosen) > 1


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_sets_are_stored_as_sent(broker, codec):
    payloads = [b"event %d " % i * 20 for i in range(50)]
    wrapper = encode_message(compression.compress(codec, encode_message_set(payloads)), codec)
    with WireClient(broker.port) as client:
        ack = client.produce_acked("zipped", 0, wrapper + encode_message(b"plain"))
        assert ack.error == 0
        error, data = client.fetch("zipped", 0, 0)
        assert data == wrapper + encode_message(b"plain")
        decoded = list(iter_messages(data))
        assert [p for _, p in decoded] == payloads + [b"plain"]
        assert decoded[-2][0] == len(wrapper)  # the wrapper's last message reports its end


def test_invalid_messages_are_refused_and_nothing_is_written(broker_factory):
    broker = broker_factory(max_message_size=100)
    good = encode_message_set([b"fine"])
    bad_crc = bytearray(encode_message_set([b"broken"]))
    bad_crc[-1] ^= 1
    with WireClient(broker.port) as client:
        assert client.produce_acked("strict", 0, good).error == 0
        assert client.produce_acked("strict", 0, encode_message_set([b"x" * 101])).error == 5
        assert client.produce_acked("strict", 0, bytes(bad_crc)).error == 2
        assert client.produce_acked("strict", 0, good[:-3]).error == 2  # truncated set
        assert client.produce_acked("strict", 9, good).error == 3
        assert client.fetch("strict", 0, 0) == (0, good)
    with WireClient(broker.port) as client:  # 0.7 produce with a bad CRC: connection closed
        client.produce("strict", 0, [b"ok"])
        client.send(rq.encode_produce("strict", 0, bytes(bad_crc)))
        assert client.closed_by_broker()
    assert "fails its CRC check" in broker.output()


def test_decompression_bomb_is_refused_with_bounded_work(broker_factory):
    broker = broker_factory(max_inflated_request_bytes=20_000_000)
    bomb_inner = encode_message_set([b"\0" * 5_000_000] * 30)  # 150 MB of zeros
    bomb = encode_message(compression.compress(CODEC_GZIP, bomb_inner), CODEC_GZIP)
    assert len(bomb) < 1_000_000  # passes max.message.size: only inflation can catch it
    with WireClient(broker.port) as client:
        ack = client.produce_acked("bomb", 0, bomb)
        assert ack.error == 2
        assert client.fetch("bomb", 0, 0) == (0, b"")
        assert client.produce_acked("bomb", 0, encode_message_set([b"after"])).error == 0
    assert "inflates past 20000000 bytes" in broker.output()


@pytest.mark.parametrize("topic", ["../evil", "..", "a/b", "x" * 256, "tab\tbed", "caf\xe9"])
def test_hostile_topic_names(broker, topic, tmp_path):
    before = set(os.listdir(tmp_path / "broker"))
    with WireClient(broker.port) as client:
        assert client.produce_acked(topic, 0, encode_message_set([b"x"])).error == 6
        assert client.fetch(topic, 0, 0) == (0, b"")
        assert client.offsets(topic, 0, -1) == (0, [0])
    with WireClient(broker.port) as client:
        client.produce(topic, 0, [b"x"])
        assert client.closed_by_broker()
    assert set(os.listdir(tmp_path / "broker")) == before
    assert not any(name.startswith(".") and name != ".lock" and name != ".kafka_cleanshutdown"
                   for name in os.listdir(broker.log_dir) if name != "mpbroker.sock")
    assert os.listdir(tmp_path.parent) and not os.path.exists(tmp_path / "evil-0")


def test_byte_level_produce_matches_protocol(broker):
    """A PRODUCE frame built by hand from PROTOCOL.md, not by our encoder."""
    payload = b"hand-made"
    message = struct.pack(">iBBI", 6 + len(payload), 1, 0, zlib.crc32(payload)) + payload
    body = struct.pack(">h", 0) + struct.pack(">h", 4) + b"hand" + struct.pack(">ii", 0, len(message)) + message
    with WireClient(broker.port) as client:
        client.send(struct.pack(">i", len(body)) + body)
        assert wait_for_fetch(client, "hand", 0, 0, len(message)) == message
