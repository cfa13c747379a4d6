"""From produce records to validated appends and answers, one ring batch at a time.

Per batch: batch records are split into their produces, fragments of large sets are
put together; every set is validated in full
(CRC, lengths, deep into compressed wrappers, ``max.message.size`` or the topic's
``max.message.bytes``, bounded inflation) before anything is written; valid sets are grouped by partition and each
partition gets one ``writev`` of all its sets, in ring order. Answers go out as ring
records: an ACK per acknowledged produce (after the append, or once a flush covers
it), a CLOSE per failed fire-and-forget produce, and one DONE for the batch's
fire-and-forget produces. An append that fails (disk full, I/O error) was undone by
the log; its produces are refused with the error's code (8, StorageError) and the
failure is logged once per partition, not once per request, until appends work again.

A leader that may not act for the moment (a roles message announced and not applied
yet, or its ZooKeeper lease lapsed) *holds* the acknowledged produces of its
replicated partitions, in the order they came, and judges them again once it may act
(at most ``HOLD_MAX_MS`` later; then they are refused). Refusing them at once made a
pipelining client see one request refused (NOT_LEADER) and the next, a moment later,
taken with a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER), which librdkafka answers by
bumping its epoch and sending again what may be stored (the fault schedules' "resent
after an epoch bump"). Every ISR change of any partition is a roles message, so those
moments were many. Fire-and-forget produces are not held: their answer is a closed
connection, which the batch's DONE must not overtake.
"""

import logging

from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.codec.errors import ErrorCode, LogCorruptError, MPBrokerError
from mpbroker.codec.message_set import count_plain_messages, validate_message_set
from mpbroker.ipc import messages
from mpbroker.ipc.messages import KAFKA_ERROR_BASE, MODE_MASK, RECORD_BATCHES, Mode
from mpbroker.ipc.partition_table import TableFullError
from mpbroker.kafka_protocol.errors import UNSUPPORTED_FOR_MESSAGE_FORMAT
from mpbroker.records.errors import RecordBatchError
from mpbroker.throttled_log import ThrottledLog
from mpbroker.workers import record_batches
from mpbroker.workers.producer_state import APPEND

log = logging.getLogger(__name__)

# An unreplicated partition has one in-sync replica, this one: durability 2 is answered on append.
_ACK_ON_APPEND = (Mode.ACK_APPEND, Mode.ACK_REPLICATED)
HOLD_MAX_MS = 1000  # held produces are refused when their leader may still not act after this


def _kept(mode: int, data):
    """A copy of a produce's bytes out of the ring: record batches as a bytearray, which
    ``record_batches.stamped`` writes their offsets into without another copy."""
    return bytearray(data) if mode & RECORD_BATCHES else bytes(data)


class _Produce:
    __slots__ = ("request_id", "topic", "partition", "mode", "data", "messages", "record_batches", "batches",
                 "first_offset", "duplicate_end")

    def __init__(self, request_id, topic, partition, mode, data):
        self.request_id = request_id
        self.topic = topic
        self.partition = partition
        self.mode = mode & MODE_MASK
        self.record_batches = bool(mode & RECORD_BATCHES)  # modern record batches, not 0.7 messages
        self.data = data
        self.messages = 0
        self.batches = ()  # a modern produce's BatchInfo, once validated
        self.first_offset = -1  # ... and its first record's offset, once appended
        self.duplicate_end = -1  # a retried idempotent produce: where the original ends (not written again)


class ProduceHandler:
    def __init__(self, logs, publisher, flusher, config, answer, replication):
        self._logs = logs
        self._replication = replication  # ReplicaManager: the replicated partitions' roles
        self._publisher = publisher
        self._flusher = flusher
        self.config = config  # replaced on reload
        self._answer = answer  # callable(kind, parts): queue a record for the acceptor
        self._partial = {}  # request id -> (first fragment, bytearray, bytes received)
        self._topics = {}  # topic bytes -> str
        self._flush_waiters = {}  # Log -> [(next_offset, request_id, partition, offset)]
        self._storage_failures = ThrottledLog(log)  # appends failing while a disk is full
        self._producers = record_batches.IdempotentProducers()  # idempotent producers' sequences, per log
        self._held = []  # (topic, partition, produces) waiting until their leader may act, in arrival order
        self._held_since_ms = 0

    def handle(self, records) -> None:
        """Handle a batch of ring records ``(kind, body view)``; copies what it keeps."""
        produces = []
        topics = self._topics
        for kind, body in records:
            if kind == messages.KIND_PRODUCE_BATCH:
                for request_id, partition, mode, topic_bytes, data in messages.decode_produce_batch(body):
                    topic = topics.get(topic_bytes)
                    if topic is None:
                        topic = topics[topic_bytes] = topic_bytes.decode("ascii")
                    produces.append(_Produce(request_id, topic, partition, mode, _kept(mode, data)))
            elif kind == messages.KIND_PRODUCE:
                produce = self._assemble(messages.decode_fragment(body))
                if produce is not None:
                    produces.append(produce)
            elif kind == messages.KIND_REPLICA_POSITIONS:
                self._replication.positions(*messages.decode_replica_positions(body))
        groups = {}
        last_fire_and_forget = None
        for produce in produces:
            if produce.mode == Mode.FIRE_AND_FORGET:
                last_fire_and_forget = produce.request_id
            if self._validate(produce):
                groups.setdefault((produce.topic, produce.partition), []).append(produce)
        for (topic, partition), group in groups.items():
            self._append(topic, partition, group)
        if last_fire_and_forget is not None:
            self._answer(messages.KIND_DONE, messages.encode_done(last_fire_and_forget))

    def _assemble(self, fragment):
        """The whole produce once its last fragment is in, else None."""
        first, buffer, received = self._partial.get(fragment.request_id, (fragment, None, 0))
        if buffer is None:
            buffer = bytearray(fragment.total_size)
        end = fragment.fragment_offset + len(fragment.data)
        buffer[fragment.fragment_offset:end] = fragment.data
        received += len(fragment.data)
        if received < fragment.total_size:
            self._partial[fragment.request_id] = (first, buffer, received)
            return None
        self._partial.pop(fragment.request_id, None)
        # record batches: the buffer itself, stamped in place (``record_batches.stamped``)
        data = buffer if first.mode & RECORD_BATCHES else bytes(buffer)
        return _Produce(first.request_id, first.topic, first.partition, first.mode, data)

    def _max_message_size(self, topic: str, partition: int) -> int:
        """The topic's ``max.message.bytes`` (its log's settings), else ``max.message.size``."""
        partition_log = self._logs.get(topic, partition)
        if partition_log is not None:
            return partition_log.config.max_message_size
        try:  # its first produce: the settings its log will be made with
            return self._logs.config_for(topic).max_message_size
        except (MPBrokerError, ValueError):  # an unreadable settings file: the log's creation says so
            return self.config.max_message_size

    def _validate(self, produce) -> bool:
        max_message_size = self._max_message_size(produce.topic, produce.partition)
        if produce.record_batches:
            try:
                produce.data, produce.batches = record_batches.checked(produce.data, self.config, max_message_size)
            except RecordBatchError as exc:
                self._fail(produce, KAFKA_ERROR_BASE + exc.code, f"refused produce to {produce.topic}-"
                                                                  f"{produce.partition}: {exc.message}")
                return False
            produce.messages = sum(batch.records for batch in produce.batches)
            return True
        count = count_plain_messages(produce.data, max_message_size)
        if count is not None:  # plain messages, all valid: the usual case, in one C call
            produce.messages = count
            return True
        result = validate_message_set(
            produce.data,
            max_message_size,
            inflate_limit=self.config.max_inflated_request_bytes,
        )
        if result.error is not None:
            self._fail(produce, result.error.code, f"refused produce to {produce.topic}-{produce.partition}: "
                                                   f"{result.error}")
            return False
        produce.messages = result.messages
        return True

    def _fail(self, produce, code: int, reason: str) -> None:
        log.warning("%s", reason)
        self._refuse(produce, code, reason)

    def _refuse(self, produce, code: int, reason: str) -> None:
        """Refuse ``produce`` with ``code``: a 0.7 code, or KAFKA_ERROR_BASE + a modern one."""
        if produce.mode == Mode.FIRE_AND_FORGET:
            self._answer(messages.KIND_CLOSE, messages.encode_close(produce.request_id, reason))
        else:
            self._answer(messages.KIND_ACK, messages.encode_ack(produce.request_id, code, produce.partition,
                                                                -1, -1, reason))

    def _append(self, topic: str, partition: int, group: list, may_hold: bool = True) -> None:
        replica = self._replication.get(topic, partition)
        if replica is not None:
            if may_hold and (self._held or self._replication.waits_to_act(replica)):
                group = self._hold(topic, partition, group)
            group = self._admitted(replica, group)
            if not group:
                return
        partition_log = self._logs.get(topic, partition)
        try:
            if partition_log is None:  # an empty set creates it too, as in 0.7: how a client creates a topic
                partition_log = self._logs.get_or_create(topic, partition, group[0].record_batches)
                self._publisher.add(partition_log)
        except (MPBrokerError, TableFullError, OSError) as exc:  # a log that cannot be opened or created
            self._fail_group(topic, partition, group, exc)
            return
        group = self._of_the_log_format(partition_log, group)
        if not group:
            return
        layer = None
        if partition_log.record_batches:
            group, layer = self._stamp(partition_log, group, None if replica is None else replica.leader_epoch)
            if not group:
                return
        data = [produce.data for produce in group if produce.data]
        total_messages = sum(produce.messages for produce in group)
        try:
            offset = partition_log.append_many(data, total_messages) if data else partition_log.log_end
        except LogCorruptError:
            raise  # a failed append could not be undone: let the worker die and recovery repair the log
        except (MPBrokerError, OSError) as exc:  # disk full, I/O error: nothing was written
            self._fail_group(topic, partition, group, exc)
            return
        if layer is not None:
            self._producers.appended(partition_log, layer)
        if self._storage_failures.active:
            self._storage_failures.ended((topic, partition), f"appending to {topic}-{partition}")
        self._publisher.count(partition_log, total_messages, sum(len(chunk) for chunk in data))
        for produce in group:
            next_offset = offset + len(produce.data)
            # A modern produce is told its first record's offset; a retried one, the original's.
            told = offset if produce.first_offset < 0 else produce.first_offset
            end = next_offset if produce.duplicate_end < 0 else produce.duplicate_end
            if replica is not None and produce.mode == Mode.ACK_REPLICATED:
                self._replication.wait_for_replicas(replica, produce.request_id, produce.partition, told, end)
            elif produce.mode in _ACK_ON_APPEND or (produce.mode == Mode.ACK_FLUSH
                                                    and end <= partition_log.flushed_end):
                self._acknowledge(produce, told, end)  # (or an empty set with nothing unflushed)
            elif produce.mode == Mode.ACK_FLUSH:
                self._flush_waiters.setdefault(partition_log, []).append(
                    (end, produce.request_id, produce.partition, told))
            offset = next_offset
        if partition_log in self._flush_waiters or partition_log.flush_due():
            self._flusher.request(partition_log)
        if replica is not None:
            self._replication.appended(replica)  # may answer durability 2 at once (an ISR of one)
        self._publisher.publish(partition_log)

    def _of_the_log_format(self, partition_log, group: list) -> list:
        """The produces of ``group`` in the format of the log; the others are refused
        (a log holds 0.7 messages or record batches, never both: ``record_format``)."""
        kept = []
        for produce in group:
            if produce.record_batches == partition_log.record_batches:
                kept.append(produce)
            elif produce.record_batches:
                self._refuse(produce, KAFKA_ERROR_BASE + UNSUPPORTED_FOR_MESSAGE_FORMAT,
                             f"{produce.topic}-{produce.partition} holds 0.7 messages: it takes no record batches")
            else:
                self._fail(produce, ErrorCode.INVALID_MESSAGE,
                           f"refused 0.7 produce to {produce.topic}-{produce.partition}: it holds record batches "
                           f"(written by modern clients)")
        return kept

    def _stamp(self, partition_log, group: list, leader_epoch) -> tuple:
        """Judge each produce's batches against its producers' sequences and write the
        offsets (and LogAppendTime) of those to append for where they will land, and on a
        replicated partition the leader epoch they are appended under (Kafka's
        partitionLeaderEpoch; the followers copy it with the bytes). Returns the produces
        to append or answer (a retried one stays, emptied) and the layer of producer
        state to commit once they are written."""
        append_time = wall_clock_ms() if partition_log.config.log_append_time else None
        layer = self._producers.begin(partition_log)
        position = partition_log.log_end
        kept = []
        for produce in group:
            if produce.data:
                verdict = record_batches.judged(layer, produce, position)
                if verdict is APPEND:
                    produce.data, produce.first_offset = record_batches.stamped(
                        produce.data, produce.batches, position, append_time, leader_epoch)
                    position += len(produce.data)
                elif verdict.error == 0:  # a retry of a batch already written
                    produce.data, produce.messages = b"", 0
                    produce.first_offset, produce.duplicate_end = verdict.first_offset, verdict.next_offset
                else:
                    self._refuse(produce, KAFKA_ERROR_BASE + verdict.error,
                                 f"{produce.topic}-{produce.partition}: {verdict.reason}")
                    continue
            kept.append(produce)
        return kept, layer

    def _hold(self, topic: str, partition: int, group: list) -> list:
        """Hold the acknowledged produces of ``group`` (behind any held before them);
        returns the fire-and-forget ones, judged now."""
        held = [produce for produce in group if produce.mode != Mode.FIRE_AND_FORGET]
        if held:
            if not self._held:
                self._held_since_ms = monotonic_ms()
            self._held.append((topic, partition, held))
        return [produce for produce in group if produce.mode == Mode.FIRE_AND_FORGET]

    def release_held(self, now: int | None = None, topic: str | None = None, final: bool = False) -> None:
        """Judge the held produces again, in the order they came: once the leader may
        act (roles applied; a tick with ``now``), or refused when ``now`` is
        ``HOLD_MAX_MS`` past the first of them; ``topic``: only that topic's, refused
        or taken now (its deletion comes next); ``final``: all of them, refused or
        taken now (the worker stops)."""
        if not self._held:
            return
        if not final and topic is None and now is not None and now - self._held_since_ms < HOLD_MAX_MS \
                and self._replication.waits_to_act(None):
            return
        held, since = self._held, self._held_since_ms
        final = final or topic is not None or (now is not None and now - since >= HOLD_MAX_MS)
        self._held = [entry for entry in held if topic is not None and entry[0] != topic]
        for entry_topic, partition, group in held:
            if topic is None or entry_topic == topic:
                self._append(entry_topic, partition, group, may_hold=not final)
        if self._held:
            self._held_since_ms = since

    def _admitted(self, replica, group: list) -> list:
        """The produces of ``group`` the replicated partition takes now; the others are
        refused (not leader, ISR too small, no ZooKeeper lease), before any append."""
        admitted = []
        for produce in group:
            refusal = self._replication.refusal(replica, produce.mode)
            if refusal is None:
                admitted.append(produce)
            else:
                self._refuse(produce, *refusal)
        return admitted

    def _fail_group(self, topic: str, partition: int, group: list, exc: Exception) -> None:
        """Refuse every produce of ``group``, logging the failure once (it may repeat for
        every request while a disk is full)."""
        code = getattr(exc, "code", ErrorCode.UNKNOWN)
        reason = f"produce to {topic}-{partition} refused: {exc}"
        self._storage_failures.event((topic, partition), logging.ERROR, reason)
        for produce in group:
            self._refuse(produce, code, reason)

    def _acknowledge(self, produce, offset: int, next_offset: int) -> None:
        self._answer(messages.KIND_ACK, messages.encode_ack(produce.request_id, ErrorCode.NO_ERROR,
                                                            produce.partition, offset, next_offset))

    def log_failed(self, partition_log) -> None:
        """The log's files were removed behind the broker: the flush acks waiting for it
        are refused (StorageError), as every later append to it is."""
        for _, request_id, partition, _ in self._flush_waiters.pop(partition_log, ()):
            self._answer(messages.KIND_ACK, messages.encode_ack(request_id, ErrorCode.STORAGE_ERROR, partition,
                                                                -1, -1, partition_log.failure))

    def forget(self, partition_log) -> None:
        """The log is being deleted: the flush acks still waiting for it are answered
        (their sets were appended before the deletion, which comes after them and
        removes them anyway), and its producers' state goes."""
        for next_offset, request_id, partition, offset in self._flush_waiters.pop(partition_log, ()):
            self._answer(messages.KIND_ACK, messages.encode_ack(request_id, ErrorCode.NO_ERROR, partition, offset,
                                                                next_offset))
        self._producers.forget(partition_log)

    def flushed(self, partition_log) -> None:
        """Answer the flush acks a completed flush of ``partition_log`` covers."""
        waiters = self._flush_waiters.get(partition_log)
        if not waiters:
            return
        flushed_end = partition_log.flushed_end
        remaining = []
        for waiter in waiters:
            next_offset, request_id, partition, offset = waiter
            if next_offset <= flushed_end:
                self._answer(messages.KIND_ACK, messages.encode_ack(request_id, ErrorCode.NO_ERROR, partition,
                                                                    offset, next_offset))
            else:
                remaining.append(waiter)
        if remaining:
            self._flush_waiters[partition_log] = remaining
            self._flusher.request(partition_log)
        else:
            del self._flush_waiters[partition_log]
