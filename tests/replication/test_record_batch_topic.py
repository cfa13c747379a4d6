"""A replicated topic of record batches (a topic for modern clients) on three real
brokers and a real ZooKeeper: created with ``create_topic(..., record_batches=True)``,
produced to with raw Produce v7 requests (``acks=-1``) on the leader's modern port; the
followers' partition directories hold the record-batches mark and their segment files
become byte-identical to the leader's, every batch stamped with the leader epoch it was
appended under; after a SIGKILL of the leader a new one is elected and every
acknowledged batch reads back from it (raw Fetch v11, and confluent-kafka), and what it
takes then carries its own leader epoch. A modern client's Metadata for an unknown topic,
with default.replication.factor 3, makes a replicated topic of record batches.

Metadata on the modern port does not list the other brokers yet: the test addresses
the leader's ``kafka_port`` directly (found through ``describe_topic``)."""

import os
import socket
import struct
import time

from confluent_kafka import Consumer, TopicPartition
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from mpbroker.records import encode_batch, iter_records, read_header
from mpbroker.records.scan import scan_batches
from mpbroker.registry import layout, replication, topic_admin
from mpbroker.segments.naming import RECORD_BATCHES_FILE, partition_dir_name
from tests.clients.helpers import wait_for
from tests.replication.cluster import log_bytes, start_cluster, state, wait_identical

TOPIC = "modern"
NONE, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER = 0, 5, 6


def request(port: int, message, version: int, response_class, timeout: float = 10.0):
    """One modern request on a connection of its own: the decoded answer."""
    message.with_header(correlation_id=7, client_id="test")
    frame = bytes(message.encode(version=version, header=True, framed=True))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _receive(sock, 4))
        body = _receive(sock, size)
    (correlation_id,) = struct.unpack_from(">i", body)
    assert correlation_id == 7
    return response_class.decode(body[4:], version=version)


def _receive(sock, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def produce(port: int, batch: bytes, topic: str = TOPIC) -> tuple:
    """``(error code, base offset)`` of a Produce v7 with acks=-1 of one batch to partition 0."""
    partition_data = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)
    answer = request(port, ProduceRequest[7](
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition_data])]), 7, ProduceResponse)
    partition = answer.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset


def fetch_all(port: int) -> list:
    """Every record the broker shows a consumer of partition 0 (raw Fetch v11), and the
    batches' bytes as fetched."""
    records, offset = [], 0
    while True:
        partition = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                                           log_start_offset=-1, partition_max_bytes=1 << 20)
        answer = request(port, FetchRequest[11](
            replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[partition])],
            forgotten_topics_data=[], rack_id=""), 11, FetchResponse)
        part = answer.responses[0].partitions[0]
        assert part.error_code == NONE, part
        found = list(iter_records(bytes(part.records or b"")))
        if not found:
            return records
        records += found
        offset = found[-1].offset + 1


def batch_ends(data: bytes) -> list:
    """Where each batch of a log's bytes ends."""
    ends, position = [], 0
    while position < len(data):
        position += 12 + read_header(data, position).batch_length
        ends.append(position)
    return ends


def leader_epochs(data: bytes) -> list:
    """The partitionLeaderEpoch of each batch of a log's bytes."""
    epochs, position = [], 0
    while position < len(data):
        header = read_header(data, position)
        epochs.append(header.partition_leader_epoch)
        position += 12 + header.batch_length
    return epochs


def produce_acked(brokers, zk_client, batch: bytes, timeout: float = 30.0) -> tuple:
    """Produce ``batch`` to whoever leads until it is acknowledged: ``(leader, base offset)``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        found = state(zk_client, TOPIC, 0)
        broker = brokers.get(found.leader) if found is not None else None
        if broker is not None and broker.process.poll() is None:
            try:
                error, base_offset = produce(broker.kafka_port, batch)
            except OSError as exc:
                error, base_offset = repr(exc), None
            if error == NONE:
                return found.leader, base_offset
            last = error
        time.sleep(0.05)
    raise AssertionError(f"no acknowledgement within {timeout}s; last: {last}")


def test_a_record_batch_topic_replicates_and_survives_the_leaders_sigkill(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic_admin.create_topic(zk_client, TOPIC, 1, 3, record_batches=True)
    wait_for(lambda: state(zk_client, TOPIC, 0) is not None, 20, what="a leader elected")
    (info,) = topic_admin.describe_topic(zk_client, TOPIC)
    first_leader = info.state.leader
    assert info.state.leader_epoch == 0

    acked = []  # (base offset, values), in the order acknowledged
    for index in range(60):
        values = [f"{index}-{i}".encode() * (1 + index % 7) for i in range(1 + index % 5)]
        batch = encode_batch([(b"k%d" % index if index % 2 else None, value, (("h", b"x"),), 1_700_000_000_000 + index)
                              for value in values])
        leader, base_offset = produce_acked(brokers, zk_client, batch)
        assert leader == first_leader
        acked.append((base_offset, values))

    # The followers copy the leader's bytes exactly, in the record-batch format.
    data = wait_identical(list(brokers.values()), TOPIC)
    scanned = scan_batches(data)
    assert scanned.valid_bytes == len(data) and scanned.batches == 60
    assert scanned.records == sum(len(values) for _, values in acked)
    assert set(leader_epochs(data)) == {0}  # stamped by the leader at epoch 0
    for broker in brokers.values():
        directory = os.path.join(broker.log_dir, partition_dir_name(TOPIC, 0))
        assert os.path.exists(os.path.join(directory, RECORD_BATCHES_FILE)), directory
    # Only the leader serves it; its offsets are the byte positions of the acknowledgements.
    followers = [broker for broker_id, broker in brokers.items() if broker_id != first_leader]
    assert produce(followers[0].kafka_port, encode_batch([(None, b"no", (), 1)]))[0] == NOT_LEADER_OR_FOLLOWER
    records = fetch_all(brokers[first_leader].kafka_port)
    assert [record.value for record in records] == [value for _, values in acked for value in values]
    assert [record.offset for record in records] == [base + i for base, values in acked for i in range(len(values))]
    assert [base + len(values) for base, values in acked] == batch_ends(data)  # [p, q) with n records: q - n

    # SIGKILL of the leader: a new leader from the ISR, at epoch 1, with every acknowledged batch.
    brokers[first_leader].kill_tree()
    wait_for(lambda: state(zk_client, TOPIC, 0).leader not in (first_leader, -1), 60, what="a new leader")
    new_leader, base_offset = produce_acked(brokers, zk_client, encode_batch([(None, b"after", (), 5)]))
    assert new_leader != first_leader and base_offset >= len(data)
    new_port = brokers[new_leader].kafka_port
    records = fetch_all(new_port)
    assert [record.value for record in records] == [value for _, values in acked for value in values] + [b"after"]
    assert [record.offset for record in records][-1] == base_offset
    survivors = [broker for broker_id, broker in brokers.items() if broker_id != first_leader]
    after = wait_identical(survivors, TOPIC)
    assert after[:len(data)] == data
    assert leader_epochs(after)[-1] == state(zk_client, TOPIC, 0).leader_epoch == 1

    # An independent consumer (librdkafka) reads the same from the new leader.
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{new_port}", "group.id": "check",
                         "enable.auto.commit": False, "broker.address.family": "v4"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < len(records) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
        assert values == [record.value for record in records]
    finally:
        consumer.close()
    assert len(log_bytes(brokers[new_leader], TOPIC, 0)) == len(after)


def test_a_modern_client_auto_creates_a_replicated_record_batch_topic(broker_factory, zk_connect, zk_client):
    """With default.replication.factor 3, a modern client's Metadata for an unknown topic
    has the registrar create it replicated, in the record-batch format (not 0.7's)."""
    brokers = start_cluster(broker_factory, zk_connect, default_replication_factor=3, min_insync_replicas=2)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic = "made-by-metadata"
    metadata = MetadataRequest[8](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
    answer = request(brokers[1].kafka_port, metadata, 8, MetadataResponse)
    assert answer.topics[0].error_code == LEADER_NOT_AVAILABLE  # being created, with replicas
    wait_for(lambda: zk_client.exists(layout.topic_path(topic)), 20, what="the topic's assignment")
    value, _ = zk_client.get(layout.topic_path(topic))
    assert replication.parse_topic_format(topic, value) is True
    assert len(replication.parse_assignment(topic, value)[0]) == 3
    wait_for(lambda: state(zk_client, topic, 0) is not None, 20, what="a leader elected")
    leader = brokers[state(zk_client, topic, 0).leader]
    error = None
    deadline = time.monotonic() + 20
    while error != NONE and time.monotonic() < deadline:
        error, _ = produce(leader.kafka_port, encode_batch([(None, b"one", (), 1)]), topic)
        time.sleep(0.05)
    assert error == NONE
    directory = os.path.join(leader.log_dir, partition_dir_name(topic, 0))
    assert os.path.exists(os.path.join(directory, RECORD_BATCHES_FILE))


def test_a_new_replicated_topic_names_no_leader_but_the_elected_one(broker_factory, zk_connect, zk_client):
    """From CreateTopics until every broker knows the elected leader, Metadata on each
    broker says LEADER_NOT_AVAILABLE (as Kafka does) or names that leader: a broker whose
    logs of the topic exist before the controller's state reached it does not answer as
    if it led an unreplicated topic (each broker named itself, with an ISR of itself, for
    up to a second). CreateTopics answers once the topic is written: its answer came
    before, and this test's next Metadata (v1, which auto-creates, as Kafka's does) made
    another broker's registrar create the topic first, with 1 replica and 4 partitions."""
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic = "named-once"
    created = request(brokers[1].kafka_port, CreateTopicsRequest[4](
        topics=[CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=3,
                                                   assignments=[], configs=[])],
        timeout_ms=10_000, validate_only=False), 4, CreateTopicsResponse)
    assert created.topics[0].error_code == NONE, created
    assert zk_client.exists(layout.topic_path(topic)), "CreateTopics answered before the topic was written"
    value, _ = zk_client.get(layout.topic_path(topic))
    assert len(replication.parse_assignment(topic, value)[0]) == 3  # this request's topic, not an auto-created one
    seen = []
    deadline = time.monotonic() + 30
    while True:
        answers = [partition_zero(broker.kafka_port, topic) for broker in brokers.values()]
        seen += answers
        leaders = {leader for leader, _ in answers}
        if len(leaders) == 1 and min(leaders) >= 0 and all(len(isr) == 3 for _, isr in answers):
            break
        assert time.monotonic() < deadline, f"no agreed leader with an ISR of 3 in 30 s: {answers}"
        time.sleep(0.01)
    (elected,) = leaders
    assert {leader for leader, _ in seen if leader >= 0} == {elected}, [a for a in seen if a[0] >= 0][:20]


def partition_zero(port: int, topic: str) -> tuple:
    """``(leader, ISR)`` of partition 0 in one broker's Metadata v1; ``(-1, ())`` while
    the topic or its leader is not available there."""
    answer = request(port, MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 1,
                     MetadataResponse)
    for found in answer.topics:
        if found.name == topic and found.error_code == NONE:
            for partition in found.partitions:
                if partition.partition_index == 0 and partition.error_code == NONE:
                    return partition.leader_id, tuple(partition.isr_nodes)
    return -1, ()
