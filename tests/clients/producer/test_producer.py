"""clients.Producer against real brokers: sync and async delivery, acknowledgements,
partitioning, compression, queue limits, callbacks, retries and reconnection, errors."""

import os
import signal
import struct
import threading
import time
from collections import defaultdict

import pytest

from mpbroker.clients import (
    BrokerUnavailableError,
    MessageSizeTooLargeError,
    ProduceError,
    Producer,
    ProducerClosedError,
    QueueFullError,
    SimpleConsumer,
)
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.codec.compression import decompress
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, encode_message_set
from tests.broker.wire import WireClient
from tests.clients.helpers import (
    HOST,
    PARTITIONS,
    broker_list,
    log_ends,
    paused,
    read_partition,
    read_topic,
    set_bytes,
    wait_for,
    wait_until_fetchable,
)

GZIP_MAGIC = b"\x1f\x8b"
SNAPPY_HEADER = b"\x82SNAPPY\x00"


# --- partitioners and callback handlers named by dotted path --------------------------


class LastPartition:
    """0.7's Partitioner interface: instances have partition(key, n)."""

    def partition(self, key, num_partitions):
        return num_partitions - 1


def key_mod_partitioner(key, num_partitions):
    return int(key) % num_partitions


class PrefixingCallbacks:
    """Instantiated by the producer from its dotted name (no arguments)."""

    def before_enqueue(self, topic, key, payload):
        return b"cb:" + payload


def top_level_messages(data: bytes) -> list:
    """[(attributes, payload)] of the top-level magic-1 messages of raw fetch bytes,
    parsed by hand (independent of the codec under test)."""
    messages = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        assert data[pos + 4] == 1, "brokers write magic 1"
        messages.append((data[pos + 5], data[pos + 10:pos + 4 + length]))
        pos += 4 + length
    assert pos == len(data)
    return messages


# --- sync delivery ------------------------------------------------------------------------


def test_sync_fire_and_forget_then_read_back(broker):
    payloads = [b"ff-%03d" % i for i in range(60)]
    with Producer(broker_list=broker_list(broker)) as producer:
        assert producer.settings.acks == "none"
        results = producer.send("ff", payloads)
        assert all(r.offset is None and r.next_offset is None for r in results)
        assert all(r.topic == "ff" and r.broker_id == 0 for r in results)
        assert sum(r.messages for r in results) == 60
        assert producer.stats.messages_sent == 60
        assert producer.stats.requests_sent == len(results)
    wait_until_fetchable(broker.port, "ff", set_bytes(payloads))
    stored = read_topic(broker.port, "ff")
    assert sorted(sum(stored.values(), [])) == payloads
    per_partition = defaultdict(int)
    for r in results:
        per_partition[r.partition] += r.messages
    for partition, messages in stored.items():
        assert len(messages) == per_partition[partition]
        assert messages == sorted(messages), "send order is kept within a partition"


@pytest.mark.parametrize("acks", ["append", "flush"])
def test_acknowledged_results_match_what_a_fetch_returns(broker, acks):
    producer = Producer(broker_list=broker_list(broker), acks=acks)
    consumer = SimpleConsumer(HOST, broker.port)
    ends = defaultdict(int)
    sent = []  # (SendResult, payloads)
    for round_ in range(5):
        for key in ("a", "b", "c"):
            payloads = [b"%s-%d-%d" % (key.encode(), round_, i) for i in range(round_ + 1)]
            [result] = producer.send("acked", payloads, key=key)
            assert (result.topic, result.broker_id, result.messages) == ("acked", 0, len(payloads))
            assert result.offset == ends[result.partition], "a set is written at the log end"
            assert result.next_offset - result.offset == len(encode_message_set(payloads))
            ends[result.partition] = result.next_offset
            sent.append((result, payloads))
            if acks == "flush":  # a flush ack means fetchable now, without waiting
                message_set = consumer.fetch("acked", result.partition, result.offset)
                assert message_set.payloads[:len(payloads)] == payloads
                assert message_set.next_offsets[len(payloads) - 1] == result.next_offset
    if acks == "append":
        wait_for(lambda: all(consumer.latest_offset("acked", p) == end for p, end in ends.items()),
                 what="appended data flushed")
    for result, payloads in sent:
        message_set = consumer.fetch("acked", result.partition, result.offset)
        assert message_set.payloads[:len(payloads)] == payloads
        assert message_set.next_offsets[len(payloads) - 1] == result.next_offset
    assert log_ends(broker.port, "acked") == [ends[p] for p in range(PARTITIONS)]
    producer.close()
    consumer.close()


def test_send_accepts_str_and_bytes_and_returns_bytes_on_fetch(broker):
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:
        [result] = producer.send("text", ["héllo", b"\x00\xffraw", bytearray(b"ba")], key="k")
    payloads = read_partition(broker.port, "text", result.partition)
    assert payloads == ["héllo".encode(), b"\x00\xffraw", b"ba"]
    assert all(type(p) is bytes for p in payloads)


# --- partitioning ------------------------------------------------------------------------------


@pytest.mark.parametrize("producer_type", ["sync", "async"])
def test_same_key_same_partition_in_send_order(broker, producer_type):
    keys = [f"user-{i}" for i in range(40)]
    producer = Producer(broker_list=broker_list(broker), acks="flush", producer_type=producer_type,
                        batch_size=7, queue_time=20)
    pairs = producer.partitions_for("keyed")
    assert [(p.broker_id, p.partition) for p in pairs] == [(0, n) for n in range(PARTITIONS)]
    expected = {key: pairs[default_partitioner(key, len(pairs))].partition for key in keys}
    assert len(set(expected.values())) > 1, "40 keys should not all hash to one partition"
    seen = defaultdict(set)
    for round_ in range(5):  # interleaved: every key once per round
        for key in keys:
            results = producer.send("keyed", f"{key}#{round_}", key=key)
            if producer_type == "sync":
                [result] = results
                seen[key].add(result.partition)
            else:
                assert results is None
    producer.close()
    if producer_type == "sync":
        assert {key: parts.pop() for key, parts in seen.items() if len(parts) == 1} == expected
    stored = read_topic(broker.port, "keyed")
    for partition, messages in stored.items():
        for key in keys:
            mine = [m for m in messages if m.startswith(f"{key}#".encode())]
            if expected[key] == partition:
                assert mine == [f"{key}#{r}".encode() for r in range(5)], f"{key} out of order or lost"
            else:
                assert mine == [], f"{key} leaked to partition {partition}"


def test_str_and_bytes_keys_hash_alike(broker):
    with Producer(broker_list=broker_list(broker), acks="append") as producer:
        for key in ("alpha", "beta", "gamma", "δέλτα"):
            [as_str] = producer.send("kk", b"s", key=key)
            [as_bytes] = producer.send("kk", b"b", key=key.encode())
            assert as_str.partition == as_bytes.partition == default_partitioner(key, PARTITIONS)


def test_keyless_messages_spread_over_partitions_one_batch_at_a_time(broker):
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:
        results = producer.send("spread", [b"m%d" % i for i in range(200)])
        one_by_one = {producer.send("spread", b"single")[0].partition for _ in range(60)}
    # A keyless batch goes to one random partition, as one request ...
    assert len(results) == 1 and results[0].messages == 200
    # ... and batches spread over every partition (P(missing one in 60) ~ 1e-7).
    assert one_by_one == set(range(PARTITIONS))
    assert sum(len(m) for m in read_topic(broker.port, "spread").values()) == 260


def test_custom_partitioner_callable(broker):
    calls = []

    def partitioner(key, num_partitions):
        calls.append((key, num_partitions))
        return int(key) % num_partitions

    with Producer(broker_list=broker_list(broker), acks="flush", partitioner_class=partitioner) as producer:
        for key in range(10):
            [result] = producer.send("custom", b"v%d" % key, key=str(key))
            assert result.partition == key % PARTITIONS
    assert calls == [(str(k), PARTITIONS) for k in range(10)]
    assert read_partition(broker.port, "custom", 1) == [b"v1", b"v5", b"v9"]


@pytest.mark.parametrize("spec, expected", [
    ("tests.clients.producer.test_producer.LastPartition", lambda key: PARTITIONS - 1),
    ("tests.clients.producer.test_producer.key_mod_partitioner", lambda key: int(key) % PARTITIONS),
])
def test_custom_partitioner_by_dotted_name(broker, spec, expected):
    with Producer({"broker.list": broker_list(broker), "acks": "flush", "partitioner.class": spec}) as producer:
        for key in ("2", "3", "8"):
            [result] = producer.send("dotted", b"k" + key.encode(), key=key)
            assert result.partition == expected(key)


def test_bad_partitioner_names_are_refused(broker):
    with pytest.raises(ValueError, match="dotted"):
        Producer(broker_list=broker_list(broker), partitioner_class="NoDots")
    with pytest.raises(ValueError, match="neither callable"):
        Producer(broker_list=broker_list(broker), partitioner_class=42)


def test_partitioner_answer_out_of_range_is_refused(broker):
    producer = Producer(broker_list=broker_list(broker), acks="flush", partitioner_class=lambda key, n: -1)
    try:
        with pytest.raises(Exception):
            producer.send("negative", b"misrouted", key="k")
        assert log_ends(broker.port, "negative") == [0] * PARTITIONS, "nothing may be written"
    finally:
        producer.close()


# --- compression ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_name, codec, magic", [("gzip", CODEC_GZIP, GZIP_MAGIC),
                                                      ("snappy", CODEC_SNAPPY, SNAPPY_HEADER)])
def test_compressed_set_is_one_wrapper_and_consumers_get_the_originals(broker, codec_name, codec, magic):
    payloads = [b"compressible payload number %04d " % i * 3 for i in range(100)]
    with Producer(broker_list=broker_list(broker), acks="flush", compression_codec=codec_name) as producer:
        [result] = producer.send("zipped", payloads, key="k")
    assert result.messages == 100
    with WireClient(broker.port) as wire:
        error, data = wire.fetch("zipped", result.partition, 0)
    assert error == 0 and len(data) == result.next_offset
    [(attributes, body)] = top_level_messages(data)  # exactly one wrapper message
    assert attributes & 3 == codec
    assert body.startswith(magic)
    assert len(body) < set_bytes(payloads) // 4, "the wrapper holds compressed bytes"
    assert decompress(codec, body, 1 << 24) == encode_message_set(payloads)
    with SimpleConsumer(HOST, broker.port) as consumer:
        received = list(consumer.messages("zipped", result.partition, 0))
    assert [m.payload for m in received] == payloads
    # inside a wrapper every message but the last reports the wrapper's start (PROTOCOL.md)
    assert [m.next_offset for m in received] == [0] * 99 + [len(data)]


def test_compressed_topics_limits_compression(broker):
    payloads = [b"same text again and again"] * 20
    with Producer(broker_list=broker_list(broker), acks="flush", compression_codec="gzip",
                  compressed_topics="zonly, other") as producer:
        [zipped] = producer.send("zonly", payloads, key="k")
        [plain] = producer.send("plain", payloads, key="k")
    with WireClient(broker.port) as wire:
        _, zipped_data = wire.fetch("zonly", zipped.partition, 0)
        _, plain_data = wire.fetch("plain", plain.partition, 0)
    assert [a & 3 for a, _ in top_level_messages(zipped_data)] == [CODEC_GZIP]
    assert top_level_messages(plain_data) == [(0, p) for p in payloads]
    assert read_partition(broker.port, "zonly", zipped.partition) == payloads


def test_incompressible_batch_over_max_message_size_is_split(broker_factory):
    broker = broker_factory(max_message_size=100_000)  # the broker would refuse a bigger wrapper
    payloads = [os.urandom(20_000) for _ in range(20)]  # 400 KB that gzip cannot shrink
    with Producer(broker_list=broker_list(broker), acks="flush", compression_codec="gzip",
                  max_message_size=100_000) as producer:
        results = producer.send("huge", payloads, key="k")
        requests = producer.stats.requests_sent
    assert requests >= 4 and len(results) == requests
    assert sum(r.messages for r in results) == 20
    assert len({r.partition for r in results}) == 1
    with WireClient(broker.port) as wire:
        _, data = wire.fetch("huge", results[0].partition, 0, 1 << 22)
    wrappers = top_level_messages(data)
    assert len(wrappers) == requests
    assert all(a & 3 == CODEC_GZIP and len(body) <= 100_000 for a, body in wrappers)
    assert read_partition(broker.port, "huge", results[0].partition) == payloads


# --- size limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("producer_type", ["sync", "async"])
def test_message_over_max_message_size_is_refused_before_sending(broker, producer_type):
    producer = Producer(broker_list=broker_list(broker), max_message_size=1000, acks="flush",
                        producer_type=producer_type)
    with pytest.raises(MessageSizeTooLargeError, match="1001-byte"):
        producer.send("limit", [b"fine", b"x" * 1001, b"also fine"], key="k")
    producer.send("limit", b"y" * 1000, key="k")  # exactly at the limit is fine
    producer.close()
    assert producer.stats.messages_sent == 1 and producer.stats.requests_sent == 1
    stored = sum(read_topic(broker.port, "limit").values(), [])
    assert stored == [b"y" * 1000], "nothing of the refused send was sent"


def test_broker_refusal_raises_at_once_without_retries(broker_factory):
    broker = broker_factory(max_message_size=1000)
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:  # its own limit is 1 MB
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("refused", b"z" * 2000, key="k")
        assert producer.stats.retries == 0 and producer.stats.messages_failed == 1
        [ok] = producer.send("refused", b"small", key="k")
    assert read_partition(broker.port, "refused", ok.partition) == [b"small"]


def test_a_broker_storage_error_is_a_produce_error(broker):
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:
        partition = producer.partitions_for("blocked")[default_partitioner("k", PARTITIONS)].partition
        # a file where the partition directory must go: the broker cannot open the log and
        # answers StorageError (8), which retrying would not fix
        open(os.path.join(broker.log_dir, f"blocked-{partition}"), "w").close()
        with pytest.raises(ProduceError) as caught:
            producer.send("blocked", b"x", key="k")
    assert caught.value.code == 8


# --- async ------------------------------------------------------------------------------------


def test_async_batches_by_batch_size(broker):
    producer = Producer(broker_list=broker_list(broker), producer_type="async", acks="flush",
                        batch_size=5, queue_time=60_000)
    for i in range(10):
        assert producer.send("batched", b"b%d" % i, key="one") is None
    wait_for(lambda: producer.stats.messages_sent == 10, what="two full batches sent")
    assert producer.stats.requests_sent == 2
    for i in range(10, 13):
        producer.send("batched", b"b%d" % i, key="one")
    time.sleep(0.3)
    assert producer.stats.messages_sent == 10, "a partial batch waits for queue.time"
    assert producer.flush(10) is True
    assert (producer.stats.messages_sent, producer.stats.requests_sent) == (13, 3)
    partition = default_partitioner("one", PARTITIONS)
    assert read_partition(broker.port, "batched", partition) == [b"b%d" % i for i in range(13)]
    producer.close()


def test_async_single_message_goes_out_after_queue_time(broker):
    producer = Producer(broker_list=broker_list(broker), producer_type="async", acks="flush",
                        batch_size=1000, queue_time=400)
    partition = default_partitioner("k", PARTITIONS)
    started = time.monotonic()
    producer.send("lonely", b"alone", key="k")
    time.sleep(0.15)
    assert producer.stats.requests_sent == 0, "sent before queue.time"
    wait_for(lambda: read_partition(broker.port, "lonely", partition) == [b"alone"], timeout=5,
             what="the message delivered without close or flush")
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < 2.0, elapsed
    # the ack is read (and counted) a moment after the flushed data becomes fetchable
    wait_for(lambda: producer.stats.requests_sent == 1, timeout=5, what="the ack counted")
    producer.close()
    assert producer.stats.requests_sent == 1


def test_async_close_drains_everything_queued(broker):
    producer = Producer(broker_list=broker_list(broker), producer_type="async", acks="flush",
                        batch_size=10_000, queue_time=60_000)
    payloads = [b"d%04d" % i for i in range(500)]
    for payload in payloads:
        producer.send("drain", payload)
    assert producer.stats.messages_sent == 0
    producer.close()
    assert producer.stats.messages_sent == 500
    stored = read_topic(broker.port, "drain")
    assert sorted(sum(stored.values(), [])) == payloads
    assert all(m == sorted(m) for m in stored.values())
    with pytest.raises(ProducerClosedError):
        producer.send("drain", b"late")
    producer.close()  # closing twice is harmless


def test_async_fire_and_forget_close_delivers(broker):
    producer = Producer(broker_list=broker_list(broker), producer_type="async", queue_time=60_000)
    payloads = [b"f%03d" % i for i in range(100)]
    for payload in payloads:
        producer.send("ffasync", payload, key="same")
    producer.close()
    wait_until_fetchable(broker.port, "ffasync", set_bytes(payloads))
    assert read_partition(broker.port, "ffasync", default_partitioner("same", PARTITIONS)) == payloads


def test_queue_full_with_zero_timeout_drops_and_counts(broker):
    errors = []

    class Errors:
        def on_error(self, batch, error):
            errors.append((list(batch), error))

    producer = Producer({"broker.list": broker_list(broker), "producer.type": "async", "queue.size": 5,
                         "batch.size": 1, "queue.enqueueTimeout.ms": 0, "retry.backoff.ms": 10,
                         "callback.handler": Errors()})
    broker.stop()  # nothing answers on that port any more
    full = 0
    started = time.monotonic()
    for i in range(50):
        try:
            producer.send("full", b"m%d" % i)
        except QueueFullError:
            full += 1
    assert time.monotonic() - started < 0.5, "timeout 0 must not block"
    assert full >= 40, full  # the queue holds 5; the sender can take at most a couple meanwhile
    assert producer.stats.messages_dropped == full
    producer.close()
    # the others were tried and failed: reported to on_error, counted, never dropped silently
    assert producer.stats.messages_failed == 50 - full
    assert sum(len(batch) for batch, _ in errors) == 50 - full
    assert all(isinstance(error, BrokerUnavailableError) for _, error in errors)
    assert producer.stats.messages_sent == 0


def _stalled_async_producer(broker, enqueue_timeout_ms):
    """An async producer (queue.size 3, batch.size 1) whose sender is stuck waiting for a
    paused broker's answer; returns (producer, callback that pauses the broker and fills
    the queue)."""
    taken = threading.Event()

    class Signal:
        def before_send(self, batch):
            taken.set()
            return batch

    producer = Producer({"broker.list": broker_list(broker), "producer.type": "async", "acks": "flush",
                         "queue.size": 3, "batch.size": 1, "queue.enqueueTimeout.ms": enqueue_timeout_ms,
                         "callback.handler": Signal()})
    producer.send("stall", b"warm-up", key="k")
    assert producer.flush(10)

    def fill():
        taken.clear()
        producer.send("stall", b"in-flight", key="k")
        assert taken.wait(5), "the sender took the message"
        for i in range(3):
            producer.send("stall", b"queued-%d" % i, key="k")  # the queue is now full

    return producer, fill


def test_queue_full_with_positive_timeout_blocks_that_long(broker):
    producer, fill = _stalled_async_producer(broker, 400)
    with paused(broker):
        fill()
        started = time.monotonic()
        with pytest.raises(QueueFullError):
            producer.send("stall", b"dropped", key="k")
        waited = time.monotonic() - started
    assert 0.38 <= waited < 1.5, waited
    assert producer.stats.messages_dropped == 1
    producer.close()
    assert read_partition(broker.port, "stall", default_partitioner("k", PARTITIONS)) == \
        [b"warm-up", b"in-flight", b"queued-0", b"queued-1", b"queued-2"]


def test_queue_full_with_minus_one_blocks_until_there_is_room(broker):
    producer, fill = _stalled_async_producer(broker, -1)
    done = threading.Event()
    outcome = []

    def late_send():
        try:
            outcome.append(producer.send("stall", b"blocked", key="k"))
        except Exception as exc:  # noqa: BLE001 - reported through outcome
            outcome.append(exc)
        done.set()

    with paused(broker):
        fill()
        thread = threading.Thread(target=late_send)
        thread.start()
        assert not done.wait(0.8), "send returned while the queue was full"
    assert done.wait(10), "send still blocked after the broker resumed"
    thread.join()
    assert outcome == [None]
    producer.close()
    assert producer.stats.messages_dropped == 0
    assert read_partition(broker.port, "stall", default_partitioner("k", PARTITIONS)) == \
        [b"warm-up", b"in-flight", b"queued-0", b"queued-1", b"queued-2", b"blocked"]


# --- callbacks ---------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.enqueued, self.before, self.after, self.errors = [], [], [], []
        self.error_seen = threading.Event()

    def before_enqueue(self, topic, key, payload):
        self.enqueued.append((topic, key, payload))
        return None if payload == b"drop" else payload.upper()

    def before_send(self, batch):
        self.before.append(list(batch))
        return batch + [("cbtopic", "extra", b"ADDED")]

    def after_send(self, batch, results):
        self.after.append((list(batch), list(results)))

    def on_error(self, batch, error):
        self.errors.append((list(batch), error))
        self.error_seen.set()


def test_callbacks_change_drop_and_observe(broker):
    recorder = Recorder()
    with Producer(broker_list=broker_list(broker), acks="flush", callback_handler=recorder) as producer:
        results = producer.send("cbtopic", [b"a", b"drop", b"b"], key="k")
    assert recorder.enqueued == [("cbtopic", "k", b"a"), ("cbtopic", "k", b"drop"), ("cbtopic", "k", b"b")]
    assert recorder.before == [[("cbtopic", "k", b"A"), ("cbtopic", "k", b"B")]]
    [(batch, seen_results)] = recorder.after
    assert batch == [("cbtopic", "k", b"A"), ("cbtopic", "k", b"B"), ("cbtopic", "extra", b"ADDED")]
    assert seen_results == results and sum(r.messages for r in results) == 3
    assert recorder.errors == []
    stored = sum(read_topic(broker.port, "cbtopic").values(), [])
    assert sorted(stored) == [b"A", b"ADDED", b"B"]
    k_partition = default_partitioner("k", PARTITIONS)
    assert read_partition(broker.port, "cbtopic", k_partition)[:2] == [b"A", b"B"]


def test_callback_handler_by_dotted_name(broker):
    with Producer({"broker.list": broker_list(broker), "acks": "flush",
                   "callback.handler": "tests.clients.producer.test_producer.PrefixingCallbacks"}) as producer:
        [result] = producer.send("cbdotted", b"payload", key="k")
    assert read_partition(broker.port, "cbdotted", result.partition) == [b"cb:payload"]


def test_on_error_when_delivery_fails_sync(broker):
    recorder = Recorder()
    producer = Producer(broker_list=broker_list(broker), acks="flush", callback_handler=recorder,
                        num_retries=1, retry_backoff_ms=10)
    producer.send("cberr", b"ok", key="k")
    broker.stop()
    with pytest.raises(BrokerUnavailableError) as caught:
        producer.send("cberr", b"lost", key="k")
    [(batch, error)] = recorder.errors
    assert error is caught.value
    assert ("cberr", "k", b"LOST") in batch
    assert producer.stats.messages_failed == len(batch)
    assert len(recorder.after) == 1, "after_send only for the delivered batch"
    producer.close()


def test_on_error_when_delivery_fails_async(broker):
    recorder = Recorder()
    producer = Producer(broker_list=broker_list(broker), acks="flush", callback_handler=recorder,
                        producer_type="async", queue_time=10, num_retries=1, retry_backoff_ms=10)
    producer.send("cberr", b"first", key="k")
    assert producer.flush(10)
    broker.stop()
    producer.send("cberr", b"second", key="k")
    assert recorder.error_seen.wait(10), "on_error was not called"
    [(batch, error)] = recorder.errors
    assert isinstance(error, BrokerUnavailableError)
    assert ("cberr", "k", b"SECOND") in batch
    producer.close()
    assert producer.stats.messages_failed == len(batch)


# --- retries, reconnection ---------------------------------------------------------------------


@pytest.mark.slow
def test_flush_acks_survive_a_killed_worker(broker):
    producers = [Producer(broker_list=broker_list(broker), acks="flush", num_retries=50, retry_backoff_ms=100)
                 for _ in range(3)]
    acknowledged, failures = [], []
    lock = threading.Lock()

    def load(index, producer):
        for i in range(150):
            payload = b"w%d-%03d" % (index, i)
            try:
                [result] = producer.send("orders", payload, key=payload)
            except (BrokerUnavailableError, ProduceError) as exc:
                with lock:
                    failures.append(exc)
                continue
            with lock:
                acknowledged.append((payload, result))

    threads = [threading.Thread(target=load, args=(i, p)) for i, p in enumerate(producers)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 60, what="some acknowledgements")
    victim = broker.worker_pid(0)
    os.kill(victim, signal.SIGKILL)
    acknowledged_at_kill = len(acknowledged)
    broker.wait_until(lambda s: s["workers"][0]["restarts"] == 1 and s["workers"][0]["state"] == "up",
                      what="worker 0 respawned")
    for thread in threads:
        thread.join(120)
    assert not any(t.is_alive() for t in threads)
    assert len(acknowledged) + len(failures) == 450, "every send returned or raised"
    assert acknowledged_at_kill < 400, "the worker died while the load was running"
    assert len(acknowledged) > 300
    with SimpleConsumer(HOST, broker.port) as consumer:
        for payload, result in acknowledged:  # each ack points at its message
            assert consumer.fetch("orders", result.partition, result.offset).payloads[0] == payload
    stored = set(sum(read_topic(broker.port, "orders").values(), []))
    assert {payload for payload, _ in acknowledged} <= stored
    for producer in producers:
        producer.close()


def test_producer_reconnects_after_a_broker_restart(fixed_port_broker):
    broker = fixed_port_broker
    producer = Producer(broker_list=broker_list(broker), acks="flush", retry_backoff_ms=50)
    [first] = producer.send("restart", b"before", key="k")
    broker.stop()
    broker.start()
    [second] = producer.send("restart", b"after", key="k")
    assert second.partition == first.partition and second.offset == first.next_offset
    # the connection the restart closed was noticed and replaced
    assert sum(connection.reconnects for _, connection in producer._brokers.connections.values()) >= 1
    assert read_partition(broker.port, "restart", first.partition) == [b"before", b"after"]
    producer.close()


def test_fire_and_forget_after_a_broker_restart_is_not_lost(fixed_port_broker):
    broker = fixed_port_broker
    producer = Producer(broker_list=broker_list(broker), retry_backoff_ms=50)
    producer.send("ffrestart", b"before", key="k")
    partition = default_partitioner("k", PARTITIONS)
    wait_for(lambda: read_partition(broker.port, "ffrestart", partition) == [b"before"])
    broker.stop()
    broker.start()
    producer.send("ffrestart", b"after-1", key="k")
    producer.send("ffrestart", b"after-2", key="k")
    producer.close()
    expected = [b"before", b"after-1", b"after-2"]
    deadline = time.monotonic() + 2
    while len(read_partition(broker.port, "ffrestart", partition)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_partition(broker.port, "ffrestart", partition) == expected  # after-1 is missing


def test_broker_unavailable_beyond_the_retries(broker):
    producer = Producer(broker_list=broker_list(broker), acks="flush", num_retries=2, retry_backoff_ms=20)
    producer.send("down", b"up", key="k")
    port = broker.port
    broker.stop()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port}"):
        producer.send("down", b"never", key="k")
    assert time.monotonic() - started < 5
    assert producer.stats.retries == 2 and producer.stats.messages_failed == 1
    producer.close()
    fresh = Producer(broker_list=f"127.0.0.1:{port}", acks="flush")
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port}"):
        fresh.send("down", b"never")
    fresh.close()


# --- argument errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["../x", "", "a/b", ".", "..", "t" * 256, "sp ace", "tab\t"])
def test_invalid_topic_is_refused_before_sending(broker, topic):
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:
        with pytest.raises(InvalidTopicError):
            producer.send(topic, b"x")
        assert producer.stats.requests_sent == 0
    assert broker.status()["partitions"] == []


@pytest.mark.parametrize("brokers", ["localhost", "a:b:c:d", "host:port", "0:h:70000", ":9092", "", " , ",
                                     "0:h:1,0:h:2"])
def test_bad_broker_list_is_a_value_error(brokers):
    with pytest.raises(ValueError):
        Producer(broker_list=brokers)


def test_broker_list_forms(broker):
    with Producer(broker_list=f"7:127.0.0.1:{broker.port}", acks="flush") as producer:
        [result] = producer.send("ids", b"x", key="k")
        assert result.broker_id == 7
        assert [p.broker_id for p in producer.partitions_for("ids")] == [7] * PARTITIONS


@pytest.mark.parametrize("properties, overrides, named", [
    ({}, {"no_such_setting": 1}, "no.such.setting"),
    ({"bogus.key": "x"}, {}, "bogus.key"),
    ({"queue.enqueueTimeout.msx": 1}, {}, "queue.enqueueTimeout.msx"),
])
def test_unknown_setting_is_a_value_error_naming_it(broker, properties, overrides, named):
    with pytest.raises(ValueError) as caught:
        Producer({"broker.list": broker_list(broker), **properties}, **overrides)
    assert repr(named) in str(caught.value)


@pytest.mark.parametrize("overrides", [
    {"producer_type": "fast"}, {"acks": "all"}, {"compression_codec": "lz4"}, {"batch_size": 0},
    {"queue_size": "many"}, {"queue_enqueue_timeout_ms": -2}, {"num_retries": -1},
])
def test_bad_setting_values_are_value_errors(broker, overrides):
    with pytest.raises(ValueError):
        Producer(broker_list=broker_list(broker), **overrides)


def test_a_producer_needs_brokers_or_zookeeper():
    with pytest.raises(ValueError, match="broker.list or zk.connect"):
        Producer()


def test_settings_from_dict_and_keywords(broker):
    producer = Producer({"broker.list": "bad", "queue.enqueueTimeout.ms": "250", "compression.codec": "snappy",
                         "compressed.topics": "a, b"}, broker_list=broker_list(broker), batch_size="7")
    settings = producer.settings
    assert (settings.queue_enqueue_timeout_ms, settings.batch_size) == (250, 7)
    assert settings.compresses("a") == CODEC_SNAPPY and settings.compresses("c") == 0
    assert settings.broker_list == broker_list(broker), "keywords override the dict"
    producer.close()


# --- partial failures, dead brokers, closing ------------------------------------------


def test_a_dead_broker_fails_its_part_only_and_drops_out_of_the_partition_list(broker_factory):
    alive, doomed = broker_factory("alive"), broker_factory("doomed")
    producer = Producer(broker_list=f"0:{HOST}:{alive.port},1:{HOST}:{doomed.port}", acks="flush",
                        num_retries=1, retry_backoff_ms=20)
    pairs = producer.partitions_for("split")
    assert {broker_id for broker_id, _ in pairs} == {0, 1} and len(pairs) == 2 * PARTITIONS
    doomed.stop()
    payloads = [b"m%d" % i for i in range(40)]  # 40 keys: spread over both brokers' partitions
    with pytest.raises(BrokerUnavailableError) as caught:
        producer.deliver([("split", b"key-%d" % i, payload) for i, payload in enumerate(payloads)])
    delivered = caught.value.results
    assert delivered and all(result.broker_id == 0 for result in delivered)
    assert caught.value.failed_messages == 40 - sum(result.messages for result in delivered)
    assert producer.stats.messages_failed == caught.value.failed_messages
    stored = sum(read_topic(alive.port, "split").values(), [])
    assert set(stored) <= set(payloads) and len(stored) == 40 - caught.value.failed_messages
    # The dead broker dropped out: the next send goes to the live one only, and succeeds.
    results = producer.send("split", [b"after-%d" % i for i in range(10)])
    assert {result.broker_id for result in results} == {0}
    assert {broker_id for broker_id, _ in producer.partitions_for("split")} == {0}
    producer.close()


def test_flush_after_close_raises_and_close_honours_its_timeout(broker):
    producer = Producer(broker_list=broker_list(broker), producer_type="async", queue_size=5,
                        batch_size=1, acks="append", socket_timeout_ms=5000)
    producer.send("closing", b"warm-up")
    assert producer.flush(10)
    with paused(broker):  # the sender waits for an answer; the queue fills up
        for i in range(5):
            producer.send("closing", b"queued-%d" % i)
        started = time.monotonic()
        assert producer.close(timeout=0.5) is False
        assert time.monotonic() - started < 2
    with pytest.raises(ProducerClosedError):
        producer.flush()


def test_the_size_check_applies_to_what_before_enqueue_returns(broker):
    class Inflate:
        def before_enqueue(self, topic, key, payload):
            return payload * 1000

    producer = Producer(broker_list=broker_list(broker), max_message_size=5000, callback_handler=Inflate())
    with pytest.raises(MessageSizeTooLargeError):
        producer.send("inflated", b"0123456789")  # 10 bytes given, 10,000 after the callback
    assert log_ends(broker.port, "inflated") == [0] * PARTITIONS
    producer.close()


def test_a_topic_given_as_bytes_is_a_str_everywhere(broker):
    with Producer(broker_list=broker_list(broker), acks="flush") as producer:
        [result] = producer.send(b"bytes-topic", b"x", key=b"k")
    assert result.topic == "bytes-topic"
    assert read_partition(broker.port, "bytes-topic", result.partition) == [b"x"]
