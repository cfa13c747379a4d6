"""0.7 reads of partitions that modern producers wrote (record batches): the broker's
RECORD_BATCHES answer, the SimpleConsumer's decoding (values, keys, headers,
timestamps, next offsets, fetches inside a batch, torn tails, damage), and what a 0.7
client that predates the code gets: an error, not garbage."""

import struct

import pytest

from mpbroker.clients import SimpleConsumer
from mpbroker.clients.consumer.record_batches import decode_batches
from mpbroker.clients.core.errors import BrokerError, CorruptMessageError, error_for
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode, InvalidMessageError
from mpbroker.codec.message_set import decode_messages
from mpbroker.records import encode_batch
from mpbroker.records.compression import CODEC_GZIP, CODEC_ZSTD
from tests.broker.wire import WireClient
from tests.clients.helpers import HOST
from tests.clients.modern import produce_modern, records, wait_readable

# --- decoding, without a broker ----------------------------------------------------------


def stored_log(batches_of_records, codec=0, start=0) -> bytes:
    """Batches as the broker stores them: each at [p, q) with baseOffset q - n."""
    log = b""
    for triples in batches_of_records:
        probe = encode_batch([(k, v, h, 1000 + i) for i, (k, v, h) in enumerate(triples)], codec=codec)
        q = start + len(log) + len(probe)
        log += encode_batch([(k, v, h, 1000 + i) for i, (k, v, h) in enumerate(triples)], codec=codec,
                            base_offset=q - len(triples))
    return log


def test_decode_gives_each_record_its_offset_and_the_batch_end_after_the_last():
    first, second = records("a", 3), records("b", 4)
    data = stored_log([first, second], start=500)
    decoded = decode_batches(data, 500)
    assert decoded.error is None and decoded.valid_bytes == len(data) and decoded.start == 500
    assert decoded.values == [v for _, v, _ in first + second]
    assert decoded.keys == [k for k, _, _ in first + second]
    assert decoded.headers == [tuple(h) for _, _, h in first + second]
    assert decoded.timestamps == [1000, 1001, 1002, 1000, 1001, 1002, 1003]
    end_first = 500 + len(stored_log([first]))
    assert decoded.offsets[:3] == [end_first - 3, end_first - 2, end_first - 1]
    assert decoded.next_offsets[2] == end_first  # after a batch's last record: its end, q
    assert decoded.next_offsets[-1] == 500 + len(data)
    assert decoded.next_offsets == [o + 1 for o in decoded.offsets]


@pytest.mark.parametrize("codec", [0, CODEC_GZIP, CODEC_ZSTD])
def test_decode_inside_a_batch_skips_the_records_below_the_offset(codec):
    data = stored_log([records("c", 10)], codec=codec, start=100)
    offsets = decode_batches(data, 100).offsets
    decoded = decode_batches(data, offsets[6])  # the broker answered from the batch's start
    assert decoded.start == 100 and decoded.offsets == offsets[6:]
    assert decoded.values == [v for _, v, _ in records("c", 10)][6:]


def test_a_torn_tail_is_left_for_the_next_fetch_and_a_lone_cut_batch_says_its_size():
    data = stored_log([records("d", 3), records("e", 3)])
    first_end = len(stored_log([records("d", 3)]))
    decoded = decode_batches(data[:-5], 0)
    assert decoded.error is None and decoded.valid_bytes == first_end and len(decoded.values) == 3
    cut = decode_batches(data[:first_end - 1], 0)
    assert cut.values == [] and cut.valid_bytes == 0 and cut.first_size == first_end and cut.error is None


def test_a_damaged_batch_after_good_ones_is_reported_at_its_offset():
    data = bytearray(stored_log([records("f", 3), records("g", 3)], start=40))
    first_end = len(stored_log([records("f", 3)]))
    data[first_end + 70] ^= 0xFF  # inside the second batch's records: its CRC fails
    decoded = decode_batches(bytes(data), 40)
    assert len(decoded.values) == 3 and decoded.valid_bytes == first_end
    assert f"offset {40 + first_end}" in decoded.error and "CRC" in decoded.error


def test_bytes_that_are_no_batch_holding_the_offset_are_an_error():
    data = stored_log([records("h", 3)])
    assert decode_batches(data, len(data) + 10).error is not None  # the header says it ends before the offset
    assert "not the start of a record batch" in decode_batches(b"\x00" * 12 + data[12:], 0).error


# --- against a broker --------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd", "lz4", "snappy"])
def test_simple_consumer_reads_values_keys_headers_and_timestamps(broker, compression):
    topic = f"modern-{compression}"
    sent = records(topic, 300)
    produce_modern(broker, topic, sent, compression=compression)
    got = wait_readable(broker.port, topic, len(sent))[0]
    assert [m.payload for m in got] == [v for _, v, _ in sent]
    assert [m.key for m in got] == [k for k, _, _ in sent]
    assert [m.headers for m in got] == [tuple(h) for _, _, h in sent]
    assert all(m.timestamp > 1_600_000_000_000 for m in got)
    assert [m.next_offset for m in got] == [m.offset + 1 for m in got]
    assert all(a.next_offset <= b.offset for a, b in zip(got, got[1:]))  # offsets rise, batches in between
    with SimpleConsumer(HOST, broker.port) as consumer:
        assert got[-1].next_offset == consumer.latest_offset(topic, 0)  # the last record ends at the log end
        # Every record's offset and next offset is a place to resume at (the group tools commit them).
        for index in (0, 1, len(got) // 2, len(got) - 1):
            again = list(consumer.messages(topic, 0, got[index].offset))
            assert again == got[index:]
            assert list(consumer.messages(topic, 0, got[index].next_offset)) == got[index + 1:]


def test_multifetch_and_small_fetch_sizes(broker):
    sent = records("multi", 200)
    produce_modern(broker, "multi", sent, linger_ms=50)
    got = wait_readable(broker.port, "multi", len(sent))[0]
    with SimpleConsumer(HOST, broker.port, fetch_size=100, max_fetch_size=1 << 20) as consumer:
        assert list(consumer.messages("multi", 0, 0)) == got  # grows the fetch size for a large batch
        (message_set, empty) = consumer.multifetch([("multi", 0, got[5].offset, 1 << 20), ("multi", 1, 0, 1000)])
        assert message_set.record_batches and message_set.payloads == [m.payload for m in got[5:]]
        assert message_set.next_offset == got[-1].next_offset
        assert not empty.payloads and not empty.error


def test_a_client_that_predates_the_code_stops_with_an_error_instead_of_misreading(broker):
    sent = records("old", 50)
    produce_modern(broker, "old", sent)
    wait_readable(broker.port, "old", len(sent))
    with WireClient(broker.port) as client:
        client.send(rq.encode_fetch("old", 0, 0, 1 << 20))
        error, data = rs.split_error(client.receive())
    assert error == ErrorCode.RECORD_BATCHES == 13 and data
    # The old client's path: a nonzero code is an error (it had no name for 13), never data.
    old_known = {code for code in ErrorCode if code < 13}
    assert error not in old_known
    exc = error_for(error, "fetch old-0 at offset 0", BrokerError)
    assert isinstance(exc, BrokerError) and exc.code == 13
    # Had it parsed the bytes as 0.7 messages, it would have misread them.
    try:
        payloads, _, _ = decode_messages(bytes(data), 0)
    except InvalidMessageError:
        payloads = None
    assert payloads != [v for _, v, _ in sent]


def test_a_damaged_batch_on_disk_is_a_corrupt_message_error_after_the_records_before_it(broker_factory):
    broker = broker_factory("damaged")
    produce_modern(broker, "rot", records("one", 20))
    first = wait_readable(broker.port, "rot", 20)[0]
    produce_modern(broker, "rot", records("two", 20))
    wait_readable(broker.port, "rot", 40)
    path = f"{broker.log_dir}/rot-0/{0:020d}.kafka"
    with open(path, "r+b") as f:
        f.seek(first[-1].next_offset + 70)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(struct.pack("B", byte[0] ^ 0xFF))
    with SimpleConsumer(HOST, broker.port) as consumer:
        seen = []
        with pytest.raises(CorruptMessageError) as raised:
            for message in consumer.messages("rot", 0, 0):
                seen.append(message)
    assert seen == first
    assert raised.value.offset == first[-1].next_offset
