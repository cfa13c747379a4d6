"""``__consumer_offsets``: where modern consumer groups' commits are kept, and which
groups this broker coordinates.

As in Kafka, a group's commits are records of the internal topic ``__consumer_offsets``
(Kafka's key and value formats, ``group_coordinator.records``), in partition
``partition_for(group)``; the leader of that partition is the group's coordinator. So
commits are as durable as any record: standalone, a commit is answered once its batch
is appended and flushed to disk (``Mode.ACK_FLUSH``: a power cut loses no answered
commit); on a ZooKeeper cluster the topic is replicated (``offsets.topic.replication.
factor``) and a commit is answered once the in-sync replicas have it (durability 2),
and a coordinator's death moves its groups with the partition's leadership. Nothing of
it goes through ZooKeeper, so thousands of commits a second cost what appends cost.

This module owns the topic's side: making the topic (standalone: its settings file, its
partitions' logs on first write; with ZooKeeper: the controller is asked, as for any
replicated topic), writing commit records through the workers (``write``), which
partitions this broker leads, and loading a partition's records into the coordinator
when it begins to lead it: a partition is read from its segment files a chunk per
tick, so a long log never stalls the acceptor's loop, and its groups answer
COORDINATOR_LOAD_IN_PROGRESS until then (clients retry). When leadership moves away,
the partition's groups are unloaded (NOT_COORDINATOR: clients look the coordinator up
again).

The log is not compacted: every commit stays until retention, which is off for this
topic (its records are the only copy of committed offsets). ARCHITECTURE.md says what
is left (Kafka compacts it).
"""

import logging
import os
import time

from mpbroker.codec.errors import InvalidTopicError, NotLeaderError
from mpbroker.group_coordinator import records as offset_records
from mpbroker.ipc.messages import KAFKA_ERROR_BASE, RECORD_BATCHES, Mode
from mpbroker.kafka_protocol.errors import KafkaError, from_legacy
from mpbroker.records import encode_batch, iter_records
from mpbroker.records.batch import RecordBatchError
from mpbroker.segments import topic_configs

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK = 1 << 20  # bytes read per step of a load
LOAD_BUDGET_S = 0.02  # a tick's loading stops after this long, so the loop goes on answering
RETENTION_MS = 100 * 365 * 24 * 3600 * 1000  # no retention: these records are the commits' only copy
CREATE_RETRY_S = 5.0
_MORE, _DONE, _WAIT = "more", "done", "wait"  # how a chunk of a load went


class _Loading:
    __slots__ = ("next_offset",)

    def __init__(self):
        self.next_offset = 0


class OffsetsTopic:
    def __init__(self, config, reads, router, legacy_handlers, metadata, coordinator):
        self.config = config
        self.partitions = config.offsets_topic_num_partitions
        self._reads = reads
        self._router = router
        self._legacy = legacy_handlers
        self._metadata = metadata
        self._coordinator = coordinator
        self._loaded = set()  # partitions whose records are in the coordinator
        self._loading = {}  # partition -> _Loading
        self._asked_to_create = -CREATE_RETRY_S
        self._ensured = False

    # --- the topic -------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return offset_records.partition_for(group_id, self.partitions)

    def ensure(self) -> bool:
        """Whether the topic exists (made now if it can be): standalone, its settings
        file with the partition count; with ZooKeeper, the controller is asked."""
        if self._ensured:
            return True
        if self.config.enable_zookeeper:
            cluster = self._metadata.cluster
            if cluster is not None and OFFSETS_TOPIC in cluster["topics"]:
                self.partitions = len(cluster["topics"][OFFSETS_TOPIC]) or self.partitions
                self._ensured = True
                return True
            now = time.monotonic()
            if now - self._asked_to_create >= CREATE_RETRY_S:
                self._asked_to_create = now
                live = len(cluster["brokers"]) if cluster is not None and cluster["brokers"] else 1
                factor = max(1, min(self.config.offsets_topic_replication_factor, live))
                self._legacy.ask_to_create(OFFSETS_TOPIC, self.partitions, record_batches=True,
                                           replication_factor=factor, configs=self._settings())
                log.info("asked the controller to create %s (%d partitions, %d replicas)", OFFSETS_TOPIC,
                         self.partitions, factor)
            return False
        found = topic_configs.read(self.config.log_dir, OFFSETS_TOPIC)
        if found is None:
            try:
                topic_configs.write(self.config.log_dir, OFFSETS_TOPIC, self.partitions, self._settings())
            except OSError as exc:
                log.error("cannot write the settings of %s: %s", OFFSETS_TOPIC, exc)
                return False
        elif isinstance(found.get("partitions"), int):
            self.partitions = found["partitions"]  # fixed once made, whatever the key says now
        self._legacy.topic_created(OFFSETS_TOPIC, self.partitions)
        self._ensured = True
        return True

    def _settings(self) -> dict:
        return {"retention.ms": str(RETENTION_MS), "segment.bytes": str(self.config.offsets_topic_segment_bytes)}

    def leads(self, partition: int) -> bool:
        if self.config.enable_zookeeper and OFFSETS_TOPIC not in self._legacy.replicated:
            return False  # (its roles have not come yet: never a local, unreplicated copy)
        try:
            self._legacy.target(OFFSETS_TOPIC, partition, record_batches=True)
        except NotLeaderError:
            return False
        except (InvalidTopicError, ValueError):
            return False
        return not self._legacy.roles_unknown_for(OFFSETS_TOPIC)

    def coordinator(self, group_id: str):
        """``(error, node, host, port)`` of the group's coordinator."""
        if not self.ensure():
            return KafkaError.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        partition = self.partition_for(group_id)
        if not self.config.enable_zookeeper:
            return (KafkaError.NONE, self.config.brokerid, *self._metadata.advertised)
        cluster = self._metadata.cluster
        leader = self._cluster_leader(partition)
        if leader == self.config.brokerid:
            return (KafkaError.NONE, leader, *self._metadata.advertised)
        for node, host, port in cluster["brokers"]:
            if node == leader:
                return KafkaError.NONE, node, host, port
        return KafkaError.COORDINATOR_NOT_AVAILABLE, -1, "", -1

    def _cluster_leader(self, partition: int) -> int:
        """The partition's leader in the registrar's view of ZooKeeper (-1: none known)."""
        cluster = self._metadata.cluster
        if cluster is None:
            return -1
        return next((leader for number, leader, *_ in cluster["topics"].get(OFFSETS_TOPIC, ())
                     if number == partition), -1)

    # --- which groups this broker may answer for -------------------------------------

    def status(self, group_id: str) -> int:
        """NONE when this broker coordinates ``group_id`` and has its commits loaded;
        else the error to answer with (a load is begun when it leads the partition)."""
        if not self.ensure():
            return KafkaError.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if not self.leads(partition):
            if partition in self._loaded or partition in self._loading:
                self._unload(partition)
            if self._cluster_leader(partition) == self.config.brokerid:
                return KafkaError.COORDINATOR_LOAD_IN_PROGRESS  # ZooKeeper says so; its role is on its way
            return KafkaError.NOT_COORDINATOR
        if partition in self._loaded:
            return KafkaError.NONE
        if partition not in self._loading:
            self._loading[partition] = _Loading()
            log.info("loading the group commits of %s-%d", OFFSETS_TOPIC, partition)
        self.step(deadline=time.monotonic() + LOAD_BUDGET_S)
        return KafkaError.NONE if partition in self._loaded else KafkaError.COORDINATOR_LOAD_IN_PROGRESS

    def loaded_here(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id`` with its commits loaded, asked
        without side effects (no topic made, no load begun: ``status`` does those)."""
        partition = self.partition_for(group_id)
        return self._ensured and partition in self._loaded and self.leads(partition)

    def check_leadership(self) -> None:
        """Unload the partitions this broker no longer leads (a tick's check)."""
        if self.config.enable_zookeeper:
            for partition in [*self._loaded, *self._loading]:
                if not self.leads(partition):
                    self._unload(partition)

    def _unload(self, partition: int) -> None:
        self._loaded.discard(partition)
        self._loading.pop(partition, None)
        groups = [group for group in self._coordinator.groups() if self.partition_for(group) == partition]
        self._coordinator.unload(groups)
        log.info("no longer the leader of %s-%d: %d groups unloaded", OFFSETS_TOPIC, partition, len(groups))

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def step(self, deadline: float) -> None:
        """Read on in the partitions being loaded until ``deadline`` (time.monotonic)."""
        for partition in list(self._loading):
            state = self._loading[partition]
            while time.monotonic() < deadline:
                progress = self._read_chunk(partition, state)
                if progress is _DONE:
                    del self._loading[partition]
                    self._loaded.add(partition)
                    log.info("loaded the group commits of %s-%d (%d bytes)", OFFSETS_TOPIC, partition,
                             state.next_offset)
                    break
                if progress is _WAIT:
                    break
            else:
                return

    def _read_chunk(self, partition: int, state: _Loading):
        """One chunk of the partition into the coordinator: _MORE, or _DONE at the end of
        the log, or _WAIT while a new leader's high watermark is below its log end (the
        last commits its predecessor acknowledged are in this log, but its followers have
        not told it so yet: a load that stopped at the high watermark would lose them)."""
        read = self._reads.read(OFFSETS_TOPIC, partition, state.next_offset, LOAD_CHUNK, True)
        if read.error == KafkaError.OFFSET_OUT_OF_RANGE and read.log_start > state.next_offset:
            state.next_offset = read.log_start
            return _MORE
        if read.error and read.error != KafkaError.OFFSET_OUT_OF_RANGE:
            return _WAIT
        if read.records is None or read.length == 0:
            _, _, partition_state, end = self._reads.bounds(OFFSETS_TOPIC, partition)
            if partition_state is not None and end < partition_state.log_end:
                return _WAIT
            return _DONE
        data = read.records if isinstance(read.records, bytes) else \
            os.pread(read.records.file.fd, read.length, read.records.position)
        last = None
        try:
            for record in iter_records(data):
                if record.key is not None:
                    try:
                        self._coordinator.load(record.key, record.value)
                    except ValueError as exc:
                        log.error("%s-%d: record at offset %d skipped: %s", OFFSETS_TOPIC, partition, record.offset,
                                  exc)
                last = record.offset
        except RecordBatchError as exc:
            log.error("%s-%d: a damaged batch at %d stops the load there: %s", OFFSETS_TOPIC, partition,
                      state.next_offset, exc)
            return _DONE
        if last is None:
            return _DONE
        state.next_offset = last + 1
        return _MORE

    # --- writing commits ----------------------------------------------------------------

    def write(self, connection, group_id: str, records, on_done) -> None:
        """Append ``records`` (``(key, value or None)``) to the group's partition;
        ``on_done(error)`` once they are durable (flushed standalone, in every in-sync
        replica with ZooKeeper) or refused."""
        partition = self.partition_for(group_id)
        now_ms = int(time.time() * 1000)
        batch = encode_batch([(key, value, (), now_ms) for key, value in records])
        mode = (Mode.ACK_REPLICATED if self.config.enable_zookeeper else Mode.ACK_FLUSH) | RECORD_BATCHES
        if not self.leads(partition):
            on_done(KafkaError.NOT_COORDINATOR)
            return
        try:
            topic_bytes, partition, route = self._legacy.target(OFFSETS_TOPIC, partition, record_batches=True)
        except (NotLeaderError, InvalidTopicError, ValueError):
            on_done(KafkaError.NOT_COORDINATOR)
            return
        self._router.produce(connection, topic_bytes, partition, mode, batch, route, _Written(on_done))


class _Written:
    """The router's outcome of a commit's append (``routing.answer`` calls ``ack``),
    handed to ``on_done`` as a modern error code."""

    __slots__ = ("on_done",)

    def __init__(self, on_done):
        self.on_done = on_done

    def ack(self, error: int, _partition: int, _offset: int, _next_offset: int, reason: str) -> None:
        code = error - KAFKA_ERROR_BASE if error >= KAFKA_ERROR_BASE else from_legacy(error)
        if code:
            log.warning("a group commit was not written: error %d %s", code, reason or "")
        self.on_done(code)

