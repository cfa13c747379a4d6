"""Modern Kafka clients against a ``NetCluster``'s replicated record-batch topic,
recorded in a ``History`` (``begin_send``/``send_*``, ``record_group_reads``,
``record_commit``), run beside ``workload``'s 0.7 clients during the same faults.

``ModernWorkload`` (a context manager) runs, from the root namespace, through every
broker's modern listener (``kafka.port``, at its node's address, which is what each
broker registers and Metadata advertises):

- **Producers** (``PRODUCERS``): confluent-kafka with ``acks=all`` and idempotence,
  confluent-kafka with ``acks=1`` and no idempotence (one request in flight; its
  retries may still reorder, as librdkafka warns, so the checker only counts that), kafka-python with ``acks=all`` and its default idempotence. Each
  sends unique values ``b"<name>-<seq>"`` to the partitions in turn, at a steady pace
  from one thread, each recorded before ``produce()``/``send()`` and finished by its
  delivery report (the offset, or the error). Retries are the clients' own, inside
  the library, up to ``DELIVERY_TIMEOUT_MS``, longer than a schedule's faults: a
  message that expires makes librdkafka's idempotent producer bump its epoch (copies
  the checker counts as resent), and kafka-python 3.0.12's stop for good. After the
  expiry of a batch it had retried, kafka-python resets its producer id and never asks
  for a new one (``TransactionManager.reset_producer_id`` leaves its state READY, so
  ``init_producer_id`` does nothing), whatever the broker (Apache Kafka 4.4 too): its
  sender sends nothing again (seeds 161042648, 271041745, 577090037 with a 20 s
  timeout; tests/kafka/test_kafka_python_recovery.py). A send the library refused before queueing
  it (``BufferError``, a metadata timeout) certainly appended nothing: ``failed``; every
  reported error is indeterminate. An idempotent producer that hits a fatal error is
  replaced by a new one (new producer id), the error kept in ``notes``.
- **A consumer group** (``GROUP``), its coordinator found first (``prepare``, while the
  topics settle: the first FindCoordinator creates ``__consumer_offsets``, seconds on a
  fresh cluster): two confluent-kafka members (cooperative-sticky
  assignment, no auto commit, ``auto.offset.reset=earliest``), each recording every
  message of a poll and then committing, synchronously, one past the highest offset it
  got of each partition in that poll.

On exit the producers flush (what stays undelivered is purged and reported
indeterminate; kafka-python's sender is closed by force) and the members close. A
delivery report that comes after that is not recorded (the send stays pending, so
indeterminate: it may land after the final read) but counted in ``notes``.

The clients' own logs are kept for a failure's evidence (``client_logs``, saved in the
history's meta by the runner): librdkafka's ``eos`` debug lines (the idempotent
producer's id, epoch bumps and their reasons), kafka-python's warnings and its
transaction manager's debug lines (its producer id's states), the last
``LOG_LINES`` of each producer. ``finish()`` after the heal waits until each
partition's ISR is every broker and every replica's log end is the leader's high
watermark, then records the group's committed offsets (an OffsetFetch, no join) and
the final read of each partition (``assign()`` from the log start to the high
watermark).
"""

import logging
import threading
import time
from collections import deque

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from mpbroker.records.batch import HEADER_SIZE, PREFIX_SIZE, read_header
from tests.replication import cluster as replicated

from .cluster import KAFKA_PORT
from .history import History
from .threads import WorkloadThreads

CONFLUENT = "confluent-kafka"
KAFKA_PYTHON = "kafka-python"
# (name, client, acks, idempotent)
PRODUCERS = (("c1", CONFLUENT, "all", True), ("c2", CONFLUENT, "1", False), ("k1", KAFKA_PYTHON, "all", True))
GROUP = "nemesis-group"
MEMBERS = ("g1", "g2")
RATE = 100  # messages a second per producer
QUEUED_MAX = 2000  # a producer waits while this many of its messages are undelivered
DELIVERY_TIMEOUT_MS = 120_000  # longer than any schedule's faults: a client retries until the heal (module docstring)
REQUEST_TIMEOUT_MS = 3_000
FLUSH_S = 3.0
POLL_S = 0.2
WARM_S = 30.0  # how long prepare() looks for the group's coordinator
LOG_LINES = 2000  # client log lines kept per producer


class ModernWorkload:
    def __init__(self, cluster, history: History, topic: str, partitions: int = 2, producers=PRODUCERS,
                 members=MEMBERS, rate: float = RATE):
        self.cluster = cluster
        self.history = history
        self.topic = topic
        self.partitions = tuple(range(partitions))
        self.producers = tuple(producers)
        self.members = tuple(members)
        self.rate = rate
        self._stop = threading.Event()
        self._threads = WorkloadThreads()
        self.notes = []  # what the clients reported that the checker does not see (fatal errors, late reports)
        self.client_logs = {}  # producer name -> its last log lines
        self._sealed = False  # set once the producers are done: later delivery reports are not recorded
        self._late = {}  # producer name -> delivery reports after the seal

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.cluster.brokers[b].host}:{KAFKA_PORT}" for b in self.cluster.broker_ids)

    # --- life cycle -------------------------------------------------------------------

    def prepare(self) -> None:
        """Start finding the group's coordinator in the background (its first FindCoordinator
        makes the brokers create ``__consumer_offsets``: seconds on a fresh cluster, which
        would otherwise come out of the schedule); ``start`` waits for it."""
        self._warming = threading.Thread(target=self._warm, name="modern-warm", daemon=True)
        self._warming.start()

    def _warm(self) -> None:
        reader = Consumer({"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "group.id": GROUP,
                           "enable.auto.commit": False, "logger": self._client_log("warm", "mpbroker.faults.warm",
                                                                                   logging.ERROR)})
        try:
            deadline = time.monotonic() + WARM_S
            while time.monotonic() < deadline:
                try:
                    reader.committed([TopicPartition(self.topic, 0)], timeout=2)
                    return
                except KafkaException:  # COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: not yet
                    time.sleep(0.1)
            self.notes.append(f"the group's coordinator was not found in {WARM_S:.0f} s before the load")
        finally:
            reader.close()

    def start(self) -> "ModernWorkload":
        warming = getattr(self, "_warming", None)
        if warming is not None:
            warming.join(WARM_S + 5)
        for name, client, acks, idempotent in self.producers:
            loop = self._confluent_loop if client == CONFLUENT else self._kafka_python_loop
            self._threads.spawn(f"modern-{name}", loop, name, acks, idempotent)
        for member in self.members:
            self._threads.spawn(f"member-{member}", self._member_loop, member)
        return self

    def stop(self) -> None:
        self._stop.set()
        alive = self._threads.join(FLUSH_S + 20)
        self._sealed = True
        assert not alive, f"modern workload threads still running: {alive}"

    @property
    def errors(self) -> list:
        """Unexpected exceptions of the threads themselves (bugs)."""
        return self._threads.errors

    def _record(self, name: str, record) -> None:
        """Run ``record`` (a delivery report's history call) unless the producers are done."""
        if self._sealed:
            self._late[name] = self._late.get(name, 0) + 1
            return
        record()

    def late_reports(self) -> dict:
        return dict(self._late)

    def _client_log(self, name: str, logger_name: str, level: int) -> logging.Logger:
        """A logger of the producer's own whose lines go to ``client_logs[name]``."""
        lines = self.client_logs.setdefault(name, deque(maxlen=LOG_LINES))
        handler = _LinesHandler(lines)
        logger = logging.getLogger(logger_name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
        return logger

    def __enter__(self) -> "ModernWorkload":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _paced(self):
        """Sequence numbers at ``rate`` a second until stopped."""
        started = time.monotonic()
        sequence = 0
        while not self._stop.is_set():
            delay = started + sequence / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield sequence
            sequence += 1

    # --- confluent-kafka ----------------------------------------------------------------

    def _confluent_producer(self, name: str, acks: str, idempotent: bool) -> Producer:
        settings = {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "acks": acks,
                    "enable.idempotence": idempotent, "linger.ms": 5, "message.timeout.ms": DELIVERY_TIMEOUT_MS,
                    "request.timeout.ms": REQUEST_TIMEOUT_MS, "topic.metadata.refresh.interval.ms": 1000,
                    "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 1000, "client.id": name,
                    "logger": self._client_log(name, f"mpbroker.faults.librdkafka.{name}", logging.DEBUG)}
        if idempotent:
            settings["debug"] = "eos"  # the producer id, epoch bumps and why
        if not idempotent:
            settings["max.in.flight.requests.per.connection"] = 1
        return Producer(settings)

    def _confluent_loop(self, name: str, acks: str, idempotent: bool) -> None:
        history = self.history
        producer = self._confluent_producer(name, acks, idempotent)

        def delivered(send_id):
            def report(error, message):
                try:
                    if error is None:
                        self._record(name, lambda: history.send_ok(send_id, message.offset()))
                    else:
                        self._record(name, lambda: history.send_error(send_id, error.name()))
                        if error.fatal():
                            fatal.append(error)
                except Exception as exc:  # raised after poll: on Python < 3.12 confluent-kafka turns an
                    broken.append(exc)    # exception raised in C inside a callback into a SystemError
            return report

        fatal, broken = [], []
        for sequence in self._paced():
            if broken:
                raise broken[0]
            while len(producer) >= QUEUED_MAX and not self._stop.is_set():
                producer.poll(0.05)
            if fatal:
                self.notes.append(f"{name}: fatal {fatal[0].name()}: {fatal[0].str()}; a new producer")
                fatal.clear()
                self._drain_confluent(producer, 0)
                producer = self._confluent_producer(name, acks, idempotent)
            partition = self.partitions[sequence % len(self.partitions)]
            value = f"{name}-{sequence}".encode()
            send_id = history.begin_send(name, CONFLUENT, acks, idempotent, self.topic, partition, value)
            try:
                producer.produce(self.topic, value=value, partition=partition, on_delivery=delivered(send_id))
            except (BufferError, KafkaException) as exc:  # refused before it was queued: nothing sent
                history.send_error(send_id, f"not queued: {exc!r}", certainly_not_appended=True)
            producer.poll(0)
        self._drain_confluent(producer, FLUSH_S)
        if broken:
            raise broken[0]

    @staticmethod
    def _drain_confluent(producer: Producer, timeout: float) -> None:
        """Deliver what is queued within ``timeout``; purge the rest (reported as errors,
        so indeterminate) and serve the reports."""
        if producer.flush(timeout):
            producer.purge()
            producer.flush(5)

    # --- kafka-python -------------------------------------------------------------------

    def _kafka_python_loop(self, name: str, acks: str, idempotent: bool) -> None:
        history = self.history
        self._client_log(name, "kafka", logging.WARNING)  # kafka-python's one logger tree: one such producer
        logging.getLogger("kafka.producer.transaction_manager").setLevel(logging.DEBUG)  # its producer id's states
        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks=acks if acks == "all" else int(acks),
                                 enable_idempotence=idempotent, linger_ms=5, request_timeout_ms=REQUEST_TIMEOUT_MS,
                                 delivery_timeout_ms=DELIVERY_TIMEOUT_MS, metadata_max_age_ms=1000,
                                 retry_backoff_ms=100, max_block_ms=2000, client_id=name)

        def delivered(send_id):
            return lambda metadata: self._record(name, lambda: history.send_ok(send_id, metadata.offset))

        def failed(send_id):
            return lambda exc: self._record(name, lambda: history.send_error(send_id, type(exc).__name__))

        try:
            for sequence in self._paced():
                partition = self.partitions[sequence % len(self.partitions)]
                value = f"{name}-{sequence}".encode()
                send_id = history.begin_send(name, KAFKA_PYTHON, acks, idempotent, self.topic, partition, value)
                try:
                    future = producer.send(self.topic, value=value, partition=partition)
                except Exception as exc:  # noqa: BLE001 - raised before the record was queued: nothing sent
                    history.send_error(send_id, f"not queued: {exc!r}", certainly_not_appended=True)
                    time.sleep(0.05)
                    continue
                future.add_callback(delivered(send_id))
                future.add_errback(failed(send_id))
            producer.flush(FLUSH_S)
        except KafkaTimeoutError:
            undelivered = sum(send.outcome == "pending" for send in list(history.sends.values())
                              if send.producer == name)
            self.notes.append(f"{name}: {undelivered} sends undelivered {FLUSH_S:.0f} s after the load stopped")
        finally:
            try:
                producer.close(timeout=1)  # what is still undelivered fails: its errback records it
            except KafkaTimeoutError:  # close() flushes first, and raises if that times out
                producer._sender.force_close()  # noqa: SLF001 - the one way to stop its sender thread

    # --- the consumer group ---------------------------------------------------------------

    def _member_loop(self, member: str) -> None:
        history = self.history
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "group.id": GROUP,
                             "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 1000, "topic.metadata.refresh.interval.ms": 1000,
                             "socket.timeout.ms": 5000, "client.id": member,
                             "logger": self._client_log(member, f"mpbroker.faults.librdkafka.{member}", logging.ERROR)})
        try:
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                messages = [m for m in consumer.consume(200, POLL_S) if m.error() is None]
                if not messages:
                    continue
                history.record_group_reads(member, self.topic,
                                           [(m.partition(), m.offset(), m.value()) for m in messages])
                offsets = {}
                for message in messages:
                    offsets[message.partition()] = max(offsets.get(message.partition(), 0), message.offset() + 1)
                self._commit(consumer, member, offsets)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, member: str, offsets: dict) -> None:
        start = time.monotonic()
        try:
            answered = consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                       asynchronous=False)
        except KafkaException as exc:
            for partition, offset in offsets.items():
                self.history.record_commit(member, self.topic, {partition: offset}, start, False,
                                           _error_name(exc.args[0] if exc.args else exc))
            return
        for found in answered:
            error = None if found.error is None else _error_name(found.error)
            self.history.record_commit(member, self.topic, {found.partition: offsets[found.partition]}, start,
                                       error is None, error)

    # --- after the heal ---------------------------------------------------------------

    def wait_settled(self, partition: int, timeout: float) -> int:
        """Wait until the partition's ISR is every broker and every replica's log end is
        the leader's high watermark; the leader."""
        deadline = time.monotonic() + timeout
        wanted = set(self.cluster.broker_ids)
        last = None
        while time.monotonic() < deadline:
            leader = self.cluster.leader(self.topic, partition)
            rows = {b: self._status_row(b, partition) for b in wanted}
            last = (leader, self.cluster.isr(self.topic, partition), rows.get(leader))
            row = rows.get(leader)
            if set(last[1]) == wanted and row is not None and row.get("role") == "leader" \
                    and all(other is not None and other["log_end"] == row["high_watermark"] for other in rows.values()):
                return leader
            time.sleep(0.1)
        raise AssertionError(f"{self.topic}-{partition} not settled after {timeout}s: leader, ISR, leader's row "
                             f"{last}\n{self.cluster.log_tails()}")

    def _status_row(self, broker_id: int, partition: int):
        status = self.cluster.brokers[broker_id].try_status()
        for row in (status or {}).get("partitions", ()):
            if row["topic"] == self.topic and row["partition"] == partition:
                return row
        return None

    def finish(self, timeout: float = 60.0) -> None:
        """Record the group's committed offsets and every partition's final read."""
        leaders = {partition: self.wait_settled(partition, timeout) for partition in self.partitions}
        reader = Consumer({"bootstrap.servers": self.bootstrap, "broker.address.family": "v4", "group.id": GROUP,
                           "enable.auto.commit": False, "logger": self._client_log("final", "mpbroker.faults.final",
                                                                                   logging.ERROR)})
        try:
            committed = reader.committed([TopicPartition(self.topic, p) for p in self.partitions], timeout=15)
            self.history.record_group_final(self.topic, {found.partition: found.offset for found in committed
                                                         if found.offset >= 0})
            for partition in self.partitions:
                self._final_read(reader, partition, leaders[partition])
        finally:
            reader.close()

    def _final_read(self, reader: Consumer, partition: int, leader: int) -> None:
        low, high = reader.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15)
        entries = []
        if high > low:
            reader.assign([TopicPartition(self.topic, partition, low)])
            deadline = time.monotonic() + 30
            while (not entries or entries[-1][0] < high - 1) and time.monotonic() < deadline:
                for message in reader.consume(1000, 0.5):
                    if message.error() is None:
                        entries.append((message.offset(), message.value()))
            reader.unassign()
            assert entries and entries[-1][0] >= high - 1, \
                f"final read of {self.topic}-{partition}: {len(entries)} records, the high watermark is {high}"
        batches = idempotent_batches(replicated.log_bytes(self.cluster.brokers[leader], self.topic, partition), high)
        self.history.record_modern_final(self.topic, partition, [(o, v) for o, v in entries if o < high], high,
                                         batches=batches)


def idempotent_batches(log: bytes, high_watermark: int) -> list:
    """``(base offset, records, producer id, epoch, base sequence)`` of each batch with a
    producer id in a record-batch log's bytes, below the high watermark."""
    found = []
    position = 0
    while position + HEADER_SIZE <= len(log):
        header = read_header(log, position)
        if header.base_offset >= high_watermark:
            break
        if header.producer_id >= 0:
            found.append((header.base_offset, header.records, header.producer_id, header.producer_epoch,
                          header.base_sequence))
        position += PREFIX_SIZE + header.batch_length
    return found


class _LinesHandler(logging.Handler):
    """Log lines into a deque; a line that repeats the one before is counted on it, not
    kept again (a client's I/O thread can log one error thousands of times)."""

    def __init__(self, lines: deque):
        super().__init__()
        self.lines = lines
        self.previous, self.repeats = None, 0

    def emit(self, record) -> None:
        text = f"{record.levelname} {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({record.exc_info[1]!r})"
        if text == self.previous and self.lines:
            self.repeats += 1
            self.lines[-1] = f"{self.lines[-1].split(' [repeated', 1)[0]} [repeated {self.repeats} times]"
            return
        self.previous, self.repeats = text, 0
        self.lines.append(f"{time.monotonic():.3f} {text}")


def _error_name(error) -> str:
    return error.name() if isinstance(error, KafkaError) else repr(error)
