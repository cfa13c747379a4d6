"""Apache Kafka 4.4 in the paper benchmark (issue 34), driven by confluent-kafka (Python
over librdkafka, the modern protocol): one KRaft node from ``bench.kafka_peer.kafka_node``
(its fair settings: Kafka's default flush policy, the page cache, no fsync during a run;
1 GiB heap), a topic per run with as many partitions as mpbroker's (``--partitions``).

confluent-kafka rather than ``rdkafka_performance``: like every other column it is a
Python client in a loop of this process, so the Timeline samples the same way, and its
producer is configured per run to send exactly the requests the paper's producer sent
(the C program's one-message-at-a-time produce and single-flight waits cannot be set so).
How each run maps onto the paper's setup (the 0.7 producer had no acknowledgement at all):

- ``b1-ff``, batch 1: one message per ProduceRequest: ``linger.ms=0``,
  ``batch.num.messages=1`` (librdkafka sends one request per partition, so one message);
  ``acks=0``, the broker answers nothing, as the paper's Kafka. librdkafka's local queue
  holds at most 1000 messages (``queue.buffering.max.messages``, ~200 KB, about a socket
  buffer): the loop waits when it is full, as the 0.7 producer's blocking socket writes
  did, so the throughput samples follow what the broker takes, not what was queued. The
  clock stops when the partitions' high watermarks (ListOffsets) reach the count: the
  broker holds them all.
- ``b50-ff``, batch 50: 50 messages per ProduceRequest: ``batch.num.messages=50`` and
  ``linger.ms`` long (100 ms) so a batch fills before it goes (it goes as soon as it holds
  50); 50 consecutive messages go to one partition, the next 50 to the next, as mpbroker's
  ``send(topic, [50 messages])``. ``acks=0``; the clock stops as above.
- ``b1-ack``, ``b50-ack``: the same requests with ``acks=1``, one request in flight: each
  message (each 50) waits for its delivery report before the next, as mpbroker's
  PRODUCE_ACKED (append) and the peers' confirms and receipts.
- ``b50-flush``: as ``b50-ack`` on a topic with ``flush.messages=1``: Kafka fsyncs the log
  in the append path once a message is unflushed, so the acks=1 answer comes after the
  batch is on disk, as mpbroker's flush acknowledgement.
- consume: ``b50-ff``'s topic, every partition assigned at offset 0 (where its fresh log
  starts, as mpbroker's consumer starts; OFFSET_BEGINNING would put a ListOffsets, ~50 ms,
  inside the clock), fetches of up to 200 KB a partition (``max.partition.fetch.bytes``:
  ~970 messages, the paper's 1000-message fetches and mpbroker's 200 KB), handed over 1000
  at a time (``consume(1000)``); no group, no commits.

What bounds the figures: each system's own usual client, as in the paper. This one makes
a Python call per message (``produce``; and a Message object per message consumed), where
mpbroker's client takes a list of 50 in one ``send`` and hands over a fetch's payloads in
one list; at batch 1 Kafka's network layer reads a connection's next request only once
the one before was handled (a request per message: a trip through its request queue
each).

Disk: allocated bytes of the runs' partition directories (segments and their indexes).
"""

import importlib.metadata
import os
import shutil
import tempfile
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.disk_usage import allocated_bytes
from bench.kafka_peer import HEAP, kafka_node
from bench.paper.messages import make_payload
from bench.paper.unavailable import SystemUnavailable
from mpbroker.testing import apache_kafka

FETCH_BYTES = 200 * 1024
CONSUME_BATCH = 1000
BATCH_LINGER_MS = 100
QUEUE_MESSAGES = 1000  # librdkafka's local queue: ~200 KB, about a socket buffer's worth
END_TIMEOUT = 120.0
STALL_TIMEOUT = 60.0
QUIET = {"log_level": 3}  # librdkafka: errors only
TOPIC_PREFIX = "paper-"

# mode -> (label, messages per request, acks, fsync each append)
MODES = {
    "b1-ff": ("batch 1, acks=0", 1, 0, False),
    "b1-ack": ("batch 1, acks=1 (one in flight)", 1, 1, False),
    "b50-ff": ("batch 50, acks=0", 50, 0, False),
    "b50-ack": ("batch 50, acks=1 (one in flight)", 50, 1, False),
    "b50-flush": ("batch 50, acks=1, flush.messages=1", 50, 1, True),
}


class KafkaSystem:
    name = "kafka"
    modes = MODES
    per_message_ack_modes = ("b1-ack",)
    consumed_mode = "b50-ff"

    def __init__(self, base_dir: str | None = None, partitions: int = 2):
        self.admin = None
        why = apache_kafka.missing()
        if why:
            raise SystemUnavailable(f"Apache Kafka cannot run here: {why}")
        try:
            apache_kafka.fetch_jars()
        except apache_kafka.ApacheKafkaError as error:
            raise SystemUnavailable(f"Apache Kafka's jars cannot be fetched: {str(error)[:500]}") from None
        self.partitions = partitions
        self.directory = tempfile.mkdtemp(prefix="paper-kafka-", dir=base_dir)
        self.kafka = kafka_node(self.directory)
        self.settings = {"client": "confluent-kafka", "partitions": partitions, "heap": HEAP,
                         "flush": "page cache (Kafka's default); b50-flush: topic flush.messages=1",
                         "fetch": f"max.partition.fetch.bytes {FETCH_BYTES}, consume({CONSUME_BATCH})"}

    def __enter__(self) -> "KafkaSystem":
        try:
            self.kafka.__enter__()
            self.admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap, **QUIET})
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.admin = None  # its librdkafka instance gone before the broker (no reconnect attempts logged)
        try:
            self.kafka.__exit__(*exc)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def versions(self) -> dict:
        return {"apache-kafka": self.kafka.version, "confluent-kafka": importlib.metadata.version("confluent-kafka"),
                "librdkafka": confluent_kafka.libversion()[0]}

    def disk_bytes(self) -> int:
        """The runs' partition directories only (the KRaft metadata log grows by itself)."""
        log_dir = self.kafka.log_dir
        return sum(allocated_bytes(os.path.join(log_dir, name)) for name in os.listdir(log_dir)
                   if name.startswith(TOPIC_PREFIX))

    @staticmethod
    def topic(mode: str) -> str:
        return f"{TOPIC_PREFIX}{mode}"

    def _create_topic(self, mode: str, checker) -> str:
        """The run's topic, created and led before the clock: every partition answers
        ListOffsets (its leader took it up: the metadata lists a leader a moment before)."""
        topic = self.topic(mode)
        config = {"flush.messages": "1"} if MODES[mode][3] else {}
        future = self.admin.create_topics([NewTopic(topic, self.partitions, 1, config=config)])[topic]
        future.result(30)
        deadline = time.monotonic() + 30
        while True:
            try:
                self._end_offsets(checker, topic)
                return topic
            except KafkaException as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kafka: {topic} not led after 30 s: {error}") from None
            time.sleep(0.05)

    def _end_offsets(self, consumer, topic: str) -> int:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(self.partitions))

    def produce(self, mode: str, count: int, timeline) -> dict:
        checker = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "paper-bench-check", **QUIET})
        try:
            return self._produce(mode, count, timeline, checker)
        finally:
            checker.close()

    def _produce(self, mode: str, count: int, timeline, checker) -> dict:
        label, batch, acks, _ = MODES[mode]
        topic = self._create_topic(mode, checker)
        failures = []
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap, "acks": acks,
                             "linger.ms": 0 if batch == 1 else BATCH_LINGER_MS, "batch.num.messages": batch,
                             "queue.buffering.max.messages": QUEUE_MESSAGES,
                             "delivery.report.only.error": True, "on_delivery": lambda error, _: failures.append(error),
                             **QUIET})
        producer.list_topics(topic, timeout=10)  # connected, partitions known: not measured
        payload = make_payload()
        produce, poll, flush = producer.produce, producer.poll, producer.flush
        partitions = self.partitions
        sent = 0
        timeline.start()
        for request in range(count // batch):
            partition = request % partitions
            for _ in range(batch):
                while True:
                    try:
                        produce(topic, payload, partition=partition)
                        break
                    except BufferError:  # librdkafka's queue is full: let it drain
                        poll(0.001)
            if acks and flush(END_TIMEOUT):  # one request in flight: wait for its answer
                raise RuntimeError(f"kafka: {topic}: no answer to a produce in {END_TIMEOUT:.0f} s")
            sent += batch
            if sent >= timeline.next_mark:
                timeline.mark(sent)
        if flush(END_TIMEOUT):
            raise RuntimeError(f"kafka: {topic}: messages still queued after {END_TIMEOUT:.0f} s")
        if failures:
            raise RuntimeError(f"kafka: {topic}: {len(failures)} messages failed: {failures[0]}")
        if not acks:  # nothing answered: until the broker holds them all
            deadline = time.monotonic() + END_TIMEOUT
            while (held := self._end_offsets(checker, topic)) < sent:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kafka: {topic} holds {held} of {sent} messages after "
                                       f"{END_TIMEOUT:.0f} s")
                time.sleep(0.002)
        return timeline.finish(sent, label=label)

    def discard(self, mode: str) -> None:
        """Nothing to do: a topic that is not read again costs only disk."""

    def consume(self, mode: str, count: int, timeline) -> dict:
        topic = self.topic(mode)
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "paper-bench",
                             "enable.auto.commit": False, "max.partition.fetch.bytes": FETCH_BYTES,
                             "fetch.queue.backoff.ms": 1, **QUIET})
        received = 0
        try:
            consumer.list_topics(topic, timeout=10)  # connected: not measured
            consume = consumer.consume
            timeline.start()
            consumer.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
            last_progress = time.monotonic()
            while received < count:
                messages = consume(CONSUME_BATCH, 1.0)
                for message in messages:
                    if message.error():
                        raise RuntimeError(f"kafka: {topic}: {message.error()}")
                if messages:
                    received += len(messages)
                    last_progress = time.monotonic()
                    if received >= timeline.next_mark:
                        timeline.mark(received)
                elif time.monotonic() - last_progress > STALL_TIMEOUT:
                    raise RuntimeError(f"kafka consumer stalled at {received} of {count} messages")
            result = timeline.finish(received, label=f"confluent-kafka, {FETCH_BYTES // 1024} KB fetches "
                                                      f"a partition, consume({CONSUME_BATCH})")
        finally:
            consumer.close()
        if received != count:
            raise RuntimeError(f"kafka: read {received} messages back, expected {count}")
        return result
