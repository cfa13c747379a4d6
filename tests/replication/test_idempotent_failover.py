"""An idempotent confluent-kafka producer (acks=all) on a three-broker cluster whose
partition leader is SIGKILLed partway through: librdkafka carries on to the new leader
by itself (Metadata from the survivors moves the leader; its retries are answered with
the producer state the new leader rebuilt from the log), and the partition read back
from the new leader holds every acknowledged message exactly once, in the order sent."""

import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from mpbroker.registry import topic_admin
from tests.clients.helpers import wait_for
from tests.replication.cluster import start_cluster, state

TOPIC = "idempotent-failover"
COUNT = 3000
KILL_AT = 1000  # acknowledged messages before the leader is SIGKILLed


def test_an_idempotent_producer_loses_and_duplicates_nothing_when_the_leader_is_sigkilled(
        broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2, replica_lag_time_max_ms=2000)
    wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 20, what="three brokers registered")
    topic_admin.create_topic(zk_client, TOPIC, 1, 3, record_batches=True)
    wait_for(lambda: state(zk_client, TOPIC, 0) is not None, 20, what="a leader elected")
    wait_for(lambda: len(topic_admin.describe_topic(zk_client, TOPIC)[0].state.isr) == 3, 20, what="a full ISR")
    first_leader = topic_admin.describe_topic(zk_client, TOPIC)[0].state.leader

    producer = Producer({"bootstrap.servers": ",".join(broker.bootstrap for broker in brokers.values()),
                         "broker.address.family": "v4", "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.num.messages": 50, "message.timeout.ms": 60_000,
                         "request.timeout.ms": 5_000, "topic.metadata.refresh.interval.ms": 1_000,
                         "retry.backoff.ms": 100})
    acked, failed = [], []
    lock = threading.Lock()

    def delivered(error, message):
        with lock:
            if error is None:
                acked.append((message.offset(), int(message.value())))
            else:
                failed.append((int(message.value()), error))

    in_flight_at_kill = None
    for number in range(COUNT):
        while True:
            try:
                producer.produce(TOPIC, value=b"%d" % number, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if in_flight_at_kill is None and len(acked) >= KILL_AT:
            # SIGKILL while messages are queued and in flight: some reached the old leader
            # unacknowledged, and librdkafka retries them on the new one.
            in_flight_at_kill = len(producer)
            brokers[first_leader].kill_tree()
        if number % 20 == 0:
            time.sleep(0.01)
    assert producer.flush(90) == 0, f"undelivered: {len(producer)}"
    assert in_flight_at_kill, f"the leader was killed with {in_flight_at_kill} messages outstanding"
    assert not failed, failed[:10]

    (info,) = topic_admin.describe_topic(zk_client, TOPIC)
    new_leader = info.state.leader
    assert new_leader not in (first_leader, -1)

    consumer = Consumer({"bootstrap.servers": brokers[new_leader].bootstrap, "group.id": "idempotent-check",
                         "enable.auto.commit": False, "broker.address.family": "v4",
                         "enable.partition.eof": True})
    read = []  # (offset, number)
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 30
        at_end = False
        while not at_end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                at_end = message.error().code() == KafkaError._PARTITION_EOF
                continue
            read.append((message.offset(), int(message.value())))
        assert at_end, f"the end of the partition was not reached; read {len(read)}"
    finally:
        consumer.close()

    numbers = [number for _, number in read]
    acked_numbers = {number for _, number in acked}
    assert len(acked_numbers) == COUNT
    duplicates = sorted(n for n, seen in Counter(numbers).items() if seen > 1)
    assert not duplicates, f"{len(numbers) - len(set(numbers))} duplicates, e.g. {duplicates[:10]}"
    missing = sorted(acked_numbers - set(numbers))
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:10]}"
    assert numbers == sorted(numbers), "out of order"
    # Each acknowledgement's offset is where the message is.
    assert dict((number, offset) for offset, number in read) == dict((number, offset) for offset, number in acked)
