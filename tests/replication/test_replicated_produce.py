"""A replicated topic on three real brokers: durability 2 is answered once every
in-sync replica has the set, the followers' logs are byte-identical to the leader's,
consumers see only what the ISR has, and a follower answers "not leader"."""

from mpbroker.codec.errors import ErrorCode
from mpbroker.registry import topic_admin
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import wait_for
from tests.replication.cluster import (
    leader_port,
    log_bytes,
    produce,
    produce_until_acked,
    read_all,
    start_cluster,
    state,
)


def test_durability_2_reaches_every_replica(broker_factory, zk_connect):
    brokers = start_cluster(broker_factory, zk_connect)
    client = start_client(zk_connect, 6000, 30_000)
    try:
        topic_admin.create_topic(client, "r", 2, 3)
        wait_for(lambda: all(state(client, "r", p) for p in (0, 1)), 20, what="leaders elected")
        payloads = [f"message {i}".encode() for i in range(100)]
        leader, ack = produce_until_acked(client, brokers, "r", 0, payloads[:1])
        _, port = leader_port(client, brokers, "r", 0)
        for start in range(1, 100, 9):
            ack = produce(port, "r", 0, payloads[start:start + 9])
            assert ack.error == ErrorCode.NO_ERROR, ack
        end = ack.next_offset
        assert read_all(port, "r", 0) == payloads
        # Acknowledged with durability 2: every replica holds exactly the leader's bytes.
        expected = log_bytes(brokers[leader], "r", 0)
        assert len(expected) == end
        for broker_id, broker in brokers.items():
            assert log_bytes(broker, "r", 0)[:end] == expected, f"broker {broker_id} differs"
        # A follower tells producers and consumers to go to the leader.
        follower = next(broker for broker_id, broker in brokers.items() if broker_id != leader)
        assert produce(follower.port, "r", 0, [b"x"]).error == ErrorCode.NOT_LEADER
        assert state(client, "r", 0).isr and set(state(client, "r", 0).isr) == {1, 2, 3}
    finally:
        close_client(client)
