"""Modern consumer groups on a three-broker cluster: ``__consumer_offsets`` is made
through the controller (replicated, record batches), a group's coordinator is the
leader of its partition, and when that broker is SIGKILLed the group moves with the
partition's leadership to another broker, with every acknowledged commit."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from mpbroker.group_coordinator import partition_for
from mpbroker.registry import topic_admin
from tests.clients.helpers import wait_for
from tests.kafka.wire import Wire
from tests.replication.cluster import start_cluster, state

TOPIC = "group-failover"
GROUP = "failover-group"
OFFSETS_PARTITIONS = 3
PARTITIONS = 2


def consumer(brokers, **config):
    return Consumer({"bootstrap.servers": ",".join(broker.bootstrap for broker in brokers), "group.id": GROUP,
                     "broker.address.family": "v4", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, **config})


def read(consumer_, count, timeout=60.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = consumer_.poll(0.2)
        if message is not None and not message.error():
            got.append(message)
    return got


def coordinator_of(broker, group) -> int:
    body = FindCoordinatorRequest[1](key=group, key_type=0).encode(version=1)
    with Wire(broker) as wire:
        answer = wire.call(10, 1, bytes(body), FindCoordinatorResponse)
    return answer.node_id if answer.error_code == 0 else -1


def test_a_coordinator_sigkilled_moves_its_group_with_every_acknowledged_commit(
        broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2, replica_lag_time_max_ms=2000,
                            group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic_admin.create_topic(zk_client, TOPIC, PARTITIONS, 3, record_batches=True)
    for partition in range(PARTITIONS):
        wait_for(lambda partition=partition: state(zk_client, TOPIC, partition) is not None, 20,
                 what="leaders elected")
    producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values()),
                         "broker.address.family": "v4", "acks": "all"})
    for i in range(200):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    first = consumer(brokers.values())
    first.subscribe([TOPIC])
    got = read(first, 120)
    assert len(got) == 120
    first.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in first.committed(
        [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)}
    assert sum(1 for offset in committed.values() if offset >= 0) >= 1, committed
    seen = {int(m.value()) for m in got}
    first.close()

    offsets_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
    leader = state(zk_client, "__consumer_offsets", offsets_partition).leader
    wait_for(lambda: coordinator_of(brokers[1], GROUP) == leader, 20, what="FindCoordinator names the leader")
    wait_for(lambda: len(topic_admin.describe_topic(zk_client, "__consumer_offsets")[offsets_partition]
                         .state.isr) == 3, 20, what="the offsets partition fully in sync")
    brokers[leader].kill_tree()

    survivors = [broker for broker_id, broker in brokers.items() if broker_id != leader]
    wait_for(lambda: coordinator_of(survivors[0], GROUP) not in (-1, leader), 40,
             what="another broker coordinates the group")
    second = consumer(survivors)
    try:
        after = {tp.partition: tp.offset for tp in second.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)}
        assert after == committed, "every acknowledged commit moved with the group"
        second.subscribe([TOPIC])
        rest = read(second, 200 - len(seen))
        numbers = [int(m.value()) for m in rest]
        assert set(numbers) == set(range(200)) - seen, "the rest, from the commits on, nothing read twice"
    finally:
        second.close()


def test_members_carry_on_when_their_coordinator_is_sigkilled(broker_factory, zk_connect, zk_client):
    """Two live members, auto commit on, messages still coming: the coordinator's broker is
    SIGKILLed (it also leads some of the topic's partitions). The members find the new
    coordinator by themselves, rejoin, and read everything; what is read twice is at
    most what was read after the last commits before the kill."""
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2, replica_lag_time_max_ms=2000,
                            group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic_admin.create_topic(zk_client, TOPIC, 3, 3, record_batches=True)
    for partition in range(3):
        wait_for(lambda partition=partition: state(zk_client, TOPIC, partition) is not None, 20,
                 what="leaders elected")
    producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values()),
                         "broker.address.family": "v4", "acks": "all", "enable.idempotence": True})

    def send(numbers):
        for i in numbers:
            producer.produce(TOPIC, value=b"%d" % i, partition=i % 3)
        assert producer.flush(60) == 0

    members = [consumer(brokers.values(), **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
               for _ in range(2)]
    for member in members:
        member.subscribe([TOPIC])
    read = []
    wait_for(lambda: all([[member.poll(0.05), member.assignment()][1] for member in members]), 60,
             what="both members assigned")  # (every member polled each time: a member that does not poll never joins)
    send(range(300))

    def poll_all(until, timeout):
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            for member in members:
                message = member.poll(0.05)
                if message is not None and not message.error():
                    read.append(int(message.value()))
    try:
        poll_all(lambda: len(set(read)) >= 300, 60)
        assert len(set(read)) == 300
        poll_all(lambda: False, 1.0)  # an auto commit of what was read
        offsets_partition = partition_for(GROUP, OFFSETS_PARTITIONS)
        wait_for(lambda: len(topic_admin.describe_topic(zk_client, "__consumer_offsets")[offsets_partition]
                             .state.isr) == 3, 20, what="the offsets partition fully in sync")
        coordinator = state(zk_client, "__consumer_offsets", offsets_partition).leader
        brokers[coordinator].kill_tree()
        send(range(300, 600))
        poll_all(lambda: set(read) >= set(range(600)), 90)
        assert set(read) == set(range(600)), f"missing: {sorted(set(range(600)) - set(read))[:20]}"
        twice = sorted({number for number in read if read.count(number) > 1})
        assert all(number >= 300 for number in twice), \
            f"the first 300 were committed before the kill: none may be read twice ({twice[:20]})"
    finally:
        for member in members:
            member.close()
