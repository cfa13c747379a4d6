"""A leader killed and started again: the requests that reach it while it starts, before
its registrar has read its replica roles from ZooKeeper.

Found by the fault schedules (``tests/faults/netcluster``, seeds 249103477 and
161042648): a restarted broker's listening socket takes connections from its first
moments, and its acceptor used to answer what waited there before the first ``roles``
message came, as for a topic without replicas: produces appended at its log end and
acknowledged (durability 1 and 2 alike) by a broker that no longer led, fetches served
past the high watermark. The new leader's epoch then cut those bytes away (lost
acknowledged writes) or, below the new epoch's start, left them in the old epoch where
the other replicas hold different bytes (a message that fails its CRC check in the
final read). Until its first roles, a broker now serves no partition with leader
epochs on disk, and its Metadata names no leader (nor a partition count) for such a
topic.
"""

import threading
import time
from types import SimpleNamespace

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.registry import topic_admin
from mpbroker.testing.local_zookeeper import free_port
from tests.broker.wire import WireClient
from tests.clients.helpers import wait_for
from tests.kafka.wire import Wire
from tests.replication.cluster import (
    BROKER_IDS,
    SESSION_MS,
    check_read_back,
    leader_port,
    message_set,
    produce_until_acked,
    state,
    wait_identical,
)


def connect_while_starting(connect, port: int, timeout: float = 30.0):
    """``connect()`` (a client of ``port``) as soon as anything listens there."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect()
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            time.sleep(0.01)


def test_a_restarted_leader_takes_no_produce_before_it_knows_its_roles(broker_factory, zk_connect, zk_client):
    brokers = {i: broker_factory(f"b{i}", brokerid=i, port=free_port(), enable_zookeeper="true", zk_connect=zk_connect,
                                 zk_sessiontimeout_ms=SESSION_MS, replica_lag_time_max_ms=3000, min_insync_replicas=2)
               for i in BROKER_IDS}  # fixed ports: the restarted broker listens where it did
    topic_admin.create_topic(zk_client, "r", 1, 3)
    acked = []
    leader, _ = produce_until_acked(zk_client, brokers, "r", 0, [b"before 0"])
    acked.append(b"before 0")
    for index in range(1, 20):
        produce_until_acked(zk_client, brokers, "r", 0, [f"before {index}".encode()])
        acked.append(f"before {index}".encode())
    wait_for(lambda: set(state(zk_client, "r", 0).isr) == set(BROKER_IDS), 30, what="a full ISR")
    restarted = brokers[leader]
    port = restarted.port
    restarted.kill_tree()
    # Its registration outlives it by a session: the new process waits for that,
    # its listening socket open; what is sent now is read when its acceptor starts.
    starting = threading.Thread(target=restarted.start, daemon=True)
    starting.start()
    late = {}
    for durability in (1, 2):
        late[durability] = connect_while_starting(lambda: WireClient(port, 30), port)
        late[durability].send(rq.encode_produce_acked(durability, "r", 0, message_set([f"late {durability}".encode()])))
    starting.join(60)
    assert not starting.is_alive(), "the broker did not start again"
    answers = {durability: responses.decode_produce_ack(conn.receive()) for durability, conn in late.items()}
    for conn in late.values():
        conn.close()
    print(f"restarted broker {leader}: late produces answered {answers}")
    for durability, answer in answers.items():
        assert answer.error == ErrorCode.NOT_LEADER, \
            f"durability {durability} sent to the restarting former leader: {answer}\n{restarted.output()[-3000:]}"
    # The cluster goes on: a new leader acknowledges, the restarted broker catches up,
    # everything acknowledged reads back and the three logs end identical.
    produce_until_acked(zk_client, brokers, "r", 0, [b"after"])
    acked.append(b"after")
    wait_for(lambda: set(state(zk_client, "r", 0).isr) == set(BROKER_IDS), 30, what="the ISR full again")
    _, leader_now = leader_port(zk_client, brokers, "r", 0)
    check_read_back(leader_now, "r", acked)
    wait_identical(list(brokers.values()), "r")


def test_a_restarted_broker_names_no_leader_before_it_knows_its_roles(broker_factory, zk_connect, zk_client):
    """Metadata that reaches a restarted broker before its first roles: its logs of the
    replicated topic are on disk, but which partitions it has and who leads them are the
    controller's to say. It used to answer the topic as an unreplicated one it led, with
    ``num.partitions`` partitions: librdkafka saw a 2-partition topic change to 4 (fault
    schedule 613522061), and a keyed producer would have sent records to partitions the
    cluster does not have. Now LEADER_NOT_AVAILABLE, as for a topic whose state has not
    come yet."""
    kafka_ports = {i: free_port() for i in BROKER_IDS}
    brokers = {i: broker_factory(f"b{i}", brokerid=i, port=free_port(), kafka_port=kafka_ports[i],
                                 enable_zookeeper="true", zk_connect=zk_connect, zk_sessiontimeout_ms=SESSION_MS,
                                 num_partitions=4, min_insync_replicas=2)
               for i in BROKER_IDS}
    topic_admin.create_topic(zk_client, "m", 2, 3, record_batches=True)
    for partition in range(2):
        wait_for(lambda: (found := state(zk_client, "m", partition)) is not None and set(found.isr) == set(BROKER_IDS),
                 30, what="a full ISR")
    restarted_id = BROKER_IDS[0]
    restarted = brokers[restarted_id]
    restarted.kill_tree()
    starting = threading.Thread(target=restarted.start, daemon=True)
    starting.start()
    address = SimpleNamespace(host="127.0.0.1", kafka_port=kafka_ports[restarted_id])
    with connect_while_starting(lambda: Wire(address, timeout=60), address.kafka_port) as early:
        answer = early.call(3, 8, bytes(MetadataRequest[8](
            topics=[MetadataRequest.MetadataRequestTopic(name="m")], allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False).encode(version=8)),
            MetadataResponse)
    starting.join(60)
    assert not starting.is_alive(), "the broker did not start again"
    [topic] = answer.topics
    print(f"metadata from the restarting broker: {topic}")
    assert topic.error_code == KafkaError.LEADER_NOT_AVAILABLE and not topic.partitions, \
        f"{topic}\n{restarted.output()[-3000:]}"
