"""clients.SimpleConsumer against real brokers: fetch, multifetch, OFFSETS, iteration with
fetch-size growth, offset-out-of-range handling, offsets inside messages, damaged
messages, following a log, reconnection."""

import glob
import os
import threading
import time

import pytest

from mpbroker.clients import (
    BrokerUnavailableError,
    MessageAndOffset,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    Producer,
    SimpleConsumer,
)
from mpbroker.clients.consumer.simple_consumer import EARLIEST_TIME, LATEST_TIME, MessageSet
from mpbroker.clients.core.errors import CorruptMessageError, NotAMessageBoundaryError
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import InvalidMessageError, WrongPartitionError
from mpbroker.codec.message import V1_OVERHEAD, encode_message_set
from tests.clients.helpers import HOST, PARTITIONS, broker_list, set_bytes


def produce(broker, topic, partition_payloads, **settings):
    """Send each list in ``partition_payloads`` ({partition: [payloads]}) to that partition
    with flush acks (a partitioner that reads the key as the partition number)."""
    results = {}
    with Producer(broker_list=broker_list(broker), acks="flush",
                  partitioner_class=lambda key, n: int(key), **settings) as producer:
        for partition, payloads in partition_payloads.items():
            results[partition] = producer.send(topic, payloads, key=str(partition))
    return results


def test_fetch_and_iteration_with_consistent_offsets(broker):
    batches = [[b"one", b"two"], [b"three"], [b"four", b"five", b"six"]]
    for batch in batches:
        produce(broker, "fetched", {2: batch})
    everything = sum(batches, [])
    ends, position = [], 0
    for payload in everything:
        position += set_bytes([payload])
        ends.append(position)
    with SimpleConsumer(HOST, broker.port) as consumer:
        message_set = consumer.fetch("fetched", 2, 0)
        assert message_set.payloads == everything
        assert all(type(p) is bytes for p in message_set.payloads)
        assert message_set.next_offsets == ends
        assert message_set.next_offset == ends[-1] == consumer.latest_offset("fetched", 2)
        assert not message_set.truncated and len(message_set) == 6
        starts = [0] + ends[:-1]
        assert list(message_set) == [MessageAndOffset(p, o, None, s) for p, o, s in zip(everything, ends, starts)]
        assert message_set.offsets == starts
        # resuming at any reported offset gives exactly the rest
        for index, offset in enumerate(ends):
            assert consumer.fetch("fetched", 2, offset).payloads == everything[index + 1:]
        # the end of the log: an empty set, no error
        at_end = consumer.fetch("fetched", 2, ends[-1])
        assert (len(at_end), at_end.size, at_end.next_offset) == (0, 0, ends[-1])
        # a small max_size ends inside a message: it is dropped, not returned half
        partial = consumer.fetch("fetched", 2, 0, max_size=ends[1] + 5)
        assert partial.payloads == [b"one", b"two"] and partial.truncated
        assert partial.next_offset == ends[1] and partial.size == ends[1] + 5
        assert [m.payload for m in consumer.messages("fetched", 2, 0)] == everything
        assert [m.next_offset for m in consumer.messages("fetched", 2, ends[2])] == ends[3:]
        # another partition and an unknown topic are empty, without errors
        assert len(consumer.fetch("fetched", 1, 0)) == 0
        assert consumer.fetch("never-produced", 0, 0).size == 0


def test_multifetch_in_order_with_one_part_erroring(broker):
    produce(broker, "multi", {0: [b"p0-a", b"p0-b"], 1: [b"p1-a"], 3: [b"p3-a", b"p3-b", b"p3-c"]})
    with SimpleConsumer(HOST, broker.port) as consumer:
        sets = consumer.multifetch([
            ("multi", 3, 0, 1 << 20),
            ("multi", 99, 0, 1 << 20),  # no such partition
            ("multi", 0, set_bytes([b"p0-a"]), 1 << 20),  # from the second message
            ("multi", 1, 0, 1 << 20),
            ("multi", 2, 0, 1 << 20),  # exists, empty
            ("multi", 0, 10_000, 1 << 20),  # past the end
        ])
        assert [(s.topic, s.partition) for s in sets] == [("multi", p) for p in (3, 99, 0, 1, 2, 0)]
        assert sets[0].check().payloads == [b"p3-a", b"p3-b", b"p3-c"]
        assert sets[2].check().payloads == [b"p0-b"]
        assert sets[2].next_offset == set_bytes([b"p0-a", b"p0-b"])
        assert sets[3].check().payloads == [b"p1-a"]
        assert sets[4].check().payloads == [] and sets[4].error == 0
        assert sets[1].error == 3 and sets[1].payloads == []
        with pytest.raises(WrongPartitionError):
            sets[1].check()
        with pytest.raises(WrongPartitionError):
            list(sets[1])
        with pytest.raises(OffsetOutOfRangeError) as caught:
            sets[5].check()
        assert (caught.value.topic, caught.value.partition, caught.value.offset) == ("multi", 0, 10_000)
        # the connection is still usable after the erroring parts
        assert consumer.fetch("multi", 1, 0).payloads == [b"p1-a"]


def test_fetch_of_a_partition_out_of_range_raises(broker):
    with SimpleConsumer(HOST, broker.port) as consumer:
        with pytest.raises(WrongPartitionError):
            consumer.fetch("nowhere", PARTITIONS, 0)
        with pytest.raises(WrongPartitionError):
            consumer.get_offsets_before("nowhere", PARTITIONS, LATEST_TIME, 1)


def test_get_offsets_before_over_several_segments(broker_factory):
    broker = broker_factory(log_file_size=300)
    for i in range(12):
        produce(broker, "segs", {1: [b"%02d-" % i + b"x" * 40, b"%02d-" % i + b"y" * 40]})  # 106-byte sets: 2 per segment
    files = sorted(glob.glob(os.path.join(broker.log_dir, "segs-1", "*.kafka")))
    bases = [int(os.path.basename(f)[:20]) for f in files]
    assert len(bases) >= 4 and bases[0] == 0
    with SimpleConsumer(HOST, broker.port) as consumer:
        end = consumer.latest_offset("segs", 1)
        assert end == 12 * set_bytes([b"00-" + b"x" * 40] * 2)
        assert consumer.earliest_offset("segs", 1) == 0
        assert consumer.get_offsets_before("segs", 1, EARLIEST_TIME, 10) == [0]
        newest_first = [end] + bases[::-1]
        now_ms = int(time.time() * 1000)
        # a time in the future: the log end first, then every segment base, newest first
        assert consumer.get_offsets_before("segs", 1, now_ms + 3_600_000, 100) == newest_first
        assert consumer.get_offsets_before("segs", 1, now_ms + 3_600_000, 2) == newest_first[:2]
        assert consumer.get_offsets_before("segs", 1, LATEST_TIME, 100) == newest_first
        # older than every segment: nothing
        assert consumer.get_offsets_before("segs", 1, now_ms - 3_600_000, 100) == []
        # age the closed segments an hour apart: a time between them picks the older ones
        now = time.time()
        for age, path in enumerate(reversed(files[:-1]), 1):
            os.utime(path, (now - age * 3600, now - age * 3600))
        closed = bases[:-1]
        between = int((now - 1.5 * 3600) * 1000)  # older than the newest closed segment
        assert consumer.get_offsets_before("segs", 1, between, 100) == closed[:-1][::-1]
        # every message is still readable, in order, across the segments
        payloads = [m.payload for m in consumer.messages("segs", 1, 0)]
    assert [p[:2] for p in payloads] == [b"%02d" % (i // 2) for i in range(24)]


def test_offsets_of_a_topic_without_a_log(broker):
    with SimpleConsumer(HOST, broker.port) as consumer:
        assert consumer.get_offsets_before("nolog", 0, LATEST_TIME, 5) == [0]
        assert consumer.get_offsets_before("nolog", 0, EARLIEST_TIME, 5) == [0]
        assert consumer.get_offsets_before("nolog", 0, int(time.time() * 1000), 5) == []


def test_big_message_grows_the_fetch_size(broker):
    big = os.urandom(100 * 1024)
    results = produce(broker, "big", {0: [b"small-1", big, b"small-2"]})
    with SimpleConsumer(HOST, broker.port, fetch_size=1024) as consumer:
        start_of_big = set_bytes([b"small-1"])
        head = consumer.fetch("big", 0, start_of_big)  # 1024 bytes of a 100 KB message
        assert head.payloads == [] and head.size == 1024 and head.truncated
        received = list(consumer.messages("big", 0, 0))
        assert [m.payload for m in received] == [b"small-1", big, b"small-2"]
        assert received[-1].next_offset == results[0][0].next_offset
        assert consumer.fetch_size == 1024, "the growth is per iteration, not permanent"


def test_message_larger_than_max_fetch_size_raises_instead_of_skipping(broker):
    big = b"B" * (100 * 1024)
    produce(broker, "toobig", {0: [b"before", big, b"after"]})
    with SimpleConsumer(HOST, broker.port, fetch_size=1024, max_fetch_size=64 * 1024) as consumer:
        seen = []
        with pytest.raises(MessageSizeTooLargeError, match="max_fetch_size"):
            for message in consumer.messages("toobig", 0, 0):
                seen.append(message.payload)
        assert seen == [b"before"], "nothing after the big message may be yielded"
    with pytest.raises(ValueError):
        SimpleConsumer(HOST, broker.port, fetch_size=2048, max_fetch_size=1024)
    with pytest.raises(ValueError):
        SimpleConsumer(HOST, broker.port, fetch_size=0)


@pytest.mark.parametrize("bad_offset", ["past_end", "negative"])
def test_offset_out_of_range_and_auto_reset(broker, bad_offset):
    payloads = [b"r0", b"r1", b"r2"]
    produce(broker, "reset", {1: payloads})
    end = set_bytes(payloads)
    offset = end + 1 if bad_offset == "past_end" else -5
    with SimpleConsumer(HOST, broker.port) as consumer:
        with pytest.raises(OffsetOutOfRangeError) as caught:
            consumer.fetch("reset", 1, offset)
        assert (caught.value.topic, caught.value.partition, caught.value.offset) == ("reset", 1, offset)
        with pytest.raises(OffsetOutOfRangeError) as caught:
            list(consumer.messages("reset", 1, offset))
        assert caught.value.offset == offset
        assert (caught.value.log_start, caught.value.log_end) == (0, end)
        if bad_offset == "past_end":
            assert str(caught.value) == f"offset {offset} is past the log end {end} of reset-1"
        else:
            assert str(caught.value) == f"offset {offset} is before the log start 0 of reset-1"
        smallest = list(consumer.messages("reset", 1, offset, auto_offset_reset="smallest"))
        assert [m.payload for m in smallest] == payloads
        assert list(consumer.messages("reset", 1, offset, auto_offset_reset="largest")) == []
        with pytest.raises(OffsetOutOfRangeError):  # an unknown reset value does not reset
            list(consumer.messages("reset", 1, offset, auto_offset_reset="earliest"))


def test_largest_reset_then_follow_sees_only_new_messages(broker):
    produce(broker, "newonly", {0: [b"old-1", b"old-2"]})
    got = []

    def later():
        time.sleep(0.2)
        produce(broker, "newonly", {0: [b"new-1", b"new-2"]})

    thread = threading.Thread(target=later)
    thread.start()
    with SimpleConsumer(HOST, broker.port, backoff_increment_ms=50) as consumer:
        for message in consumer.messages("newonly", 0, 1 << 30, auto_offset_reset="largest",
                                         follow=True, max_wait_ms=1500):
            got.append(message.payload)
    thread.join()
    assert got == [b"new-1", b"new-2"]


def test_follow_picks_up_new_messages_and_stops_when_idle(broker):
    produce(broker, "follow", {3: [b"existing"]})
    start = set_bytes([b"existing"])
    sent = [b"live-%d" % i for i in range(6)]

    def producer_thread():
        with Producer(broker_list=broker_list(broker), acks="append",
                      partitioner_class=lambda key, n: 3) as producer:
            for payload in sent:
                time.sleep(0.1)
                producer.send("follow", payload)

    thread = threading.Thread(target=producer_thread)
    received = []
    with SimpleConsumer(HOST, broker.port, backoff_increment_ms=100) as consumer:
        started = time.monotonic()
        thread.start()
        last_at = None
        for message in consumer.messages("follow", 3, start, follow=True, max_wait_ms=600):
            received.append(message)
            last_at = time.monotonic()
        finished = time.monotonic()
    thread.join()
    assert [m.payload for m in received] == sent
    assert received[-1].next_offset == start + set_bytes(sent)
    assert last_at - started >= 0.55, "the messages came in while it was following"
    assert 0.55 <= finished - last_at < 2.0, finished - last_at
    # without follow, the end of the log ends the iteration at once
    with SimpleConsumer(HOST, broker.port) as consumer:
        begun = time.monotonic()
        assert list(consumer.messages("follow", 3, received[-1].next_offset)) == []
        assert time.monotonic() - begun < 0.5


def test_consumer_survives_a_broker_restart(fixed_port_broker):
    broker = fixed_port_broker
    produce(broker, "survive", {0: [b"before"]})
    with SimpleConsumer(HOST, broker.port) as consumer:
        assert consumer.fetch("survive", 0, 0).payloads == [b"before"]
        broker.stop()
        with pytest.raises(BrokerUnavailableError, match=f"{HOST}:{broker.port}"):
            consumer.fetch("survive", 0, 0)
        broker.start()
        assert consumer.fetch("survive", 0, 0).payloads == [b"before"]
        produce(broker, "survive", {0: [b"after"]})
        broker.stop()
        broker.start()
        # the connection is stale again: the next request must reconnect by itself
        assert [m.payload for m in consumer.messages("survive", 0, 0)] == [b"before", b"after"]
        assert consumer.latest_offset("survive", 0) == set_bytes([b"before", b"after"])


def test_compressed_sets_decode_with_wrapper_offsets(broker):
    first = [b"g%d" % i for i in range(5)]
    second = [b"s%d" % i for i in range(3)]
    [[gz]] = produce(broker, "mixed", {2: first}, compression_codec="gzip").values()
    [[sn]] = produce(broker, "mixed", {2: second}, compression_codec="snappy").values()
    produce(broker, "mixed", {2: [b"plain"]})
    with SimpleConsumer(HOST, broker.port) as consumer:
        message_set = consumer.fetch("mixed", 2, 0)
        assert message_set.payloads == first + second + [b"plain"]
        assert message_set.next_offsets == ([0] * 4 + [gz.next_offset] + [sn.offset] * 2 + [sn.next_offset]
                                            + [sn.next_offset + len(encode_message_set([b"plain"]))])
        # resuming at a wrapper's end never lands inside a wrapper
        assert consumer.fetch("mixed", 2, gz.next_offset).payloads == second + [b"plain"]


def test_stopping_an_iteration_early_leaves_the_consumer_usable(broker):
    payloads = [b"early-%03d" % i for i in range(300)]
    with Producer(broker_list=f"{HOST}:{broker.port}", acks="flush") as producer:
        for start in range(0, 300, 30):  # ten sets: the iteration prefetches the next one
            producer.send("early", payloads[start:start + 30], key=b"k")
    partition = default_partitioner(b"k", PARTITIONS)  # one broker: pair index == partition
    with SimpleConsumer(HOST, broker.port, fetch_size=400) as consumer:
        seen = []
        for message in consumer.messages("early", partition, 0):
            seen.append(message.payload)
            if len(seen) == 45:
                break  # a fetch is in flight: its answer must not reach the next request
        assert seen == payloads[:45]
        assert consumer.latest_offset("early", partition) > 0
        again = [m.payload for m in consumer.messages("early", partition, 0)]
        assert again == payloads


def test_message_sets_is_the_bulk_form_of_messages(broker):
    payloads = [b"bulk-%04d" % i for i in range(2000)]
    with Producer(broker_list=f"{HOST}:{broker.port}", acks="flush") as producer:
        for start in range(0, 2000, 100):
            producer.send("bulk", payloads[start:start + 100], key=b"same")
    partition = default_partitioner(b"same", PARTITIONS)
    with SimpleConsumer(HOST, broker.port, fetch_size=4096) as consumer:
        sets = list(consumer.message_sets("bulk", partition, 0))
        assert len(sets) > 1 and all(isinstance(s.payloads, list) and s.payloads for s in sets)
        assert sum((s.payloads for s in sets), []) == payloads
        assert [s.offset for s in sets[1:]] == [s.next_offset for s in sets[:-1]]
        singles = list(consumer.messages("bulk", partition, 0))
        assert [m.payload for m in singles] == payloads
        assert [m.next_offset for m in singles] == sum((s.next_offsets for s in sets), [])


# --- offsets inside messages, damaged messages -------------------------------------------------


def segment_file(broker, topic, partition, base=0):
    return os.path.join(broker.log_dir, f"{topic}-{partition}", "%020d.kafka" % base)


def damage(path, position):
    """Flip the bits of one byte of a segment file in place (the broker serves the file as it is)."""
    with open(path, "r+b") as segment:
        segment.seek(position)
        byte = segment.read(1)
        segment.seek(position)
        segment.write(bytes([byte[0] ^ 0xFF]))


def test_an_offset_inside_a_message_names_the_nearest_message_start(broker_factory):
    broker = broker_factory(log_file_size=300)
    for i in range(8):  # 2 sets of 53 bytes per ~300-byte segment
        produce(broker, "walk", {1: [b"%02d-" % i + b"x" * 40, b"%02d-" % i + b"y" * 40]})
    size = set_bytes([b"00-" + b"x" * 40])
    bases = sorted(int(os.path.basename(f)[:20]) for f in glob.glob(os.path.join(broker.log_dir, "walk-1", "*.kafka")))
    assert len(bases) >= 3
    starts = list(range(0, 16 * size, size))
    with SimpleConsumer(HOST, broker.port, fetch_size=4096) as consumer:
        for start in starts:  # every message start is its own nearest start, in every segment
            assert consumer.nearest_message_start("walk", 1, start) == start
            assert consumer.fetch("walk", 1, start).payloads
        for inside, nearest in ((1, 0), (size - 1, 0), (bases[2] + size + 3, bases[2] + size),
                                (bases[-1] + 10, bases[-1]), (starts[-1] + V1_OVERHEAD + 5, starts[-1])):
            assert consumer.nearest_message_start("walk", 1, inside) == nearest
            with pytest.raises(NotAMessageBoundaryError) as caught:
                consumer.fetch("walk", 1, inside)
            assert (caught.value.topic, caught.value.partition, caught.value.offset, caught.value.nearest) \
                == ("walk", 1, inside, nearest)
            assert str(caught.value) == (f"{inside} is not the start of a message in walk-1; "
                                         f"the nearest earlier message starts at {nearest}")
            with pytest.raises(NotAMessageBoundaryError) as caught:
                list(consumer.messages("walk", 1, inside))
            assert caught.value.nearest == nearest
        # the nearest start reads on from there without losing a message
        assert len(list(consumer.messages("walk", 1, nearest))) == 1


def test_the_walk_jumps_over_messages_larger_than_its_fetches(broker_factory):
    broker = broker_factory(max_message_size=3_000_000)
    big = os.urandom(1_500_000)  # larger than the walk's 1 MiB fetches
    payloads = [b"first", big, b"third", b"fourth"]
    produce(broker, "jump", {0: payloads}, max_message_size=3_000_000)
    starts = [set_bytes(payloads[:i]) for i in range(len(payloads))]
    with SimpleConsumer(HOST, broker.port, fetch_size=1024) as consumer:
        assert consumer.nearest_message_start("jump", 0, starts[1] + 700_000) == starts[1]
        assert consumer.nearest_message_start("jump", 0, starts[3] + 2) == starts[3]
        assert consumer.nearest_message_start("jump", 0, starts[2]) == starts[2]
        with pytest.raises(NotAMessageBoundaryError) as caught:
            list(consumer.messages("jump", 0, starts[1] + 700_000))
        assert caught.value.nearest == starts[1]


def test_an_offset_inside_a_large_payload_stops_at_once_instead_of_growing_the_fetch(broker):
    """Bytes of the payload read as a length of 2 GB: no fetch of the whole partition, no overflow."""
    payloads = [b"x" * 50_000 for _ in range(40)]  # 2 MB; b"xxxx" read as a length is 0x78787878
    produce(broker, "garbage", {0: payloads})
    inside = set_bytes(payloads[:3]) + V1_OVERHEAD + 100
    with SimpleConsumer(HOST, broker.port, fetch_size=1024) as consumer:
        head = consumer.fetch("garbage", 0, inside)
        assert head.payloads == [] and head.first_length == 0x78787878
        with pytest.raises(NotAMessageBoundaryError) as caught:
            list(consumer.messages("garbage", 0, inside))
        assert caught.value.nearest == set_bytes(payloads[:3])


def test_the_fetch_size_grows_to_the_message_at_once_but_not_past_max_fetch_size(broker):
    big = os.urandom(100 * 1024)
    produce(broker, "grow", {0: [b"small", big]})
    start = set_bytes([b"small"])
    with SimpleConsumer(HOST, broker.port, fetch_size=1024, max_fetch_size=1 << 20) as consumer:
        head = consumer.fetch("grow", 0, start)
        assert consumer.grow_fetch_size(head, 1024) == set_bytes([big]), "one step to the size it needs"
    with SimpleConsumer(HOST, broker.port, fetch_size=1024, max_fetch_size=64 * 1024) as consumer:
        with pytest.raises(MessageSizeTooLargeError, match=f"{set_bytes([big])} bytes, larger than max_fetch_size"):
            consumer.grow_fetch_size(consumer.fetch("grow", 0, start), 1024)
    with pytest.raises(ValueError):
        SimpleConsumer(HOST, broker.port, max_fetch_size=1 << 31)


def test_a_damaged_message_comes_after_the_valid_ones_before_it(broker):
    payloads = [b"good-%d" % i for i in range(3)] + [b"damaged"] + [b"after-%d" % i for i in range(2)]
    produce(broker, "damaged", {2: payloads})
    bad = set_bytes(payloads[:3])
    damage(segment_file(broker, "damaged", 2), bad + V1_OVERHEAD + 2)  # a payload byte: the CRC fails
    with SimpleConsumer(HOST, broker.port) as consumer:
        seen = []
        with pytest.raises(CorruptMessageError) as caught:
            for message in consumer.messages("damaged", 2, 0):
                seen.append(message.payload)
        assert seen == payloads[:3], "the valid messages before it first"
        assert isinstance(caught.value, InvalidMessageError) and caught.value.offset == bad
        assert str(caught.value) == f"message at offset {bad} of damaged-2 fails its CRC check"
        message_set = consumer.fetch("damaged", 2, 0)  # the valid prefix, the damage noted
        assert message_set.payloads == payloads[:3] and message_set.next_offset == bad
        assert message_set.corrupt.offset == bad
        with pytest.raises(CorruptMessageError):
            list(message_set)
        with pytest.raises(CorruptMessageError) as caught:  # at a message start: damage, not a bad offset
            consumer.fetch("damaged", 2, bad)
        assert caught.value.offset == bad
        sets = consumer.multifetch([("damaged", 2, 0, 1 << 20), ("damaged", 2, bad, 1 << 20)])
        assert sets[0].check().payloads == payloads[:3]
        with pytest.raises(CorruptMessageError):
            sets[1].check()
        after = bad + set_bytes([b"damaged"])
        assert [m.payload for m in consumer.messages("damaged", 2, after)] == payloads[4:]


def test_a_damaged_length_at_a_message_start_is_damage_not_a_bad_offset(broker):
    payloads = [b"one", b"two", b"three"]
    produce(broker, "badlength", {0: payloads})
    second = set_bytes(payloads[:1])
    with open(segment_file(broker, "badlength", 0), "r+b") as segment:
        segment.seek(second)
        segment.write((1 << 24).to_bytes(4, "big"))  # claims 16 MB, the log holds a few bytes more
    with SimpleConsumer(HOST, broker.port) as consumer:
        with pytest.raises(CorruptMessageError, match=f"at offset {second} of badlength-0 has length {1 << 24}"):
            list(consumer.messages("badlength", 0, 0))


def test_a_multifetch_part_the_broker_shortened_is_grown_not_called_damaged(broker):
    """The broker may answer a MULTIFETCH part with less than asked (every part together
    under its limit): a part that ends inside a message that the log holds whole is a
    reason to fetch again, not damage. (The part is the first bytes of a real answer, as
    the broker's shortening leaves it.)"""
    produce(broker, "shortened", {0: [b"x" * 300_000]})
    with SimpleConsumer(HOST, broker.port, max_fetch_size=4 << 20) as consumer:
        (whole,) = consumer.multifetch([("shortened", 0, 0, 1 << 20)])
        assert len(whole.payloads) == 1
        raw = consumer._request(rq.encode_fetch("shortened", 0, 0, 1 << 20))
        error, data = rs.split_error(raw)
        part = MessageSet("shortened", 0, 0, error, bytes(data)[:100_000])  # what a shortened part holds
        assert not part.payloads
        grown = consumer.grow_fetch_size(part, 1 << 20)
        assert grown >= 300_000 + V1_OVERHEAD
