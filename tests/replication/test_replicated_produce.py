"""A replicated topic on three real brokers: durability 2 is answered once every
in-sync replica has the set, the followers' logs are byte-identical to the leader's,
consumers see only what the ISR has, and a follower answers "not leader"."""

import json
import subprocess
import sys

from mpbroker.codec.errors import ErrorCode
from mpbroker.registry import layout, replication, topic_admin
from tests.clients.helpers import wait_for
from tests.ops.test_metrics import scrape, value
from tests.replication.cluster import (
    leader_port,
    log_bytes,
    produce,
    produce_until_acked,
    read_all,
    start_cluster,
    state,
)


def test_durability_2_reaches_every_replica(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect)
    topic_admin.create_topic(zk_client, "r", 2, 3)
    wait_for(lambda: all(state(zk_client, "r", p) for p in (0, 1)), 20, what="leaders elected")
    payloads = [f"message {i}".encode() for i in range(100)]
    leader, ack = produce_until_acked(zk_client, brokers, "r", 0, payloads[:1])
    _, port = leader_port(zk_client, brokers, "r", 0)
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
    assert state(zk_client, "r", 0).isr and set(state(zk_client, "r", 0).isr) == {1, 2, 3}


def test_status_and_metrics_show_roles_high_watermarks_isrs_and_the_controller(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, metrics_enable="true", metrics_port=0,
                            metrics_host="127.0.0.1")
    topic_admin.create_topic(zk_client, "m", 1, 3)
    leader, ack = produce_until_acked(zk_client, brokers, "m", 0, [b"one", b"two"])
    for broker_id, broker in brokers.items():
        status = broker.wait_until(
            lambda status: any(p["topic"] == "m" and p["high_watermark"] == ack.next_offset
                               for p in status["partitions"]), what="the high watermark everywhere")
        (row,) = [p for p in status["partitions"] if p["topic"] == "m"]
        assert row["role"] == ("leader" if broker_id == leader else "follower")
        assert row["leader_epoch"] == 0 and sorted(row["isr"]) == [1, 2, 3]
    assert "role" in ctl_status_text(brokers[leader]) and "leader" in ctl_status_text(brokers[leader])
    controller = json.loads(zk_client.get(replication.CONTROLLER)[0])["brokerid"]
    for broker_id, broker in brokers.items():
        broker.wait_until(lambda status: status["metrics"]["state"] == "up", what="the metrics exporter")
        samples = scrape(broker.status()["metrics"]["port"])
        assert value(samples, "mpbroker_controller") == (1 if broker_id == controller else 0)
        assert value(samples, "mpbroker_partition_leader", topic="m", partition="0") == (broker_id == leader)
        assert value(samples, "mpbroker_partition_high_watermark", topic="m", partition="0") == ack.next_offset
    # A follower dies: the leader counts an ISR shrink and one under-replicated partition.
    follower = next(broker_id for broker_id in brokers if broker_id != leader)
    brokers[follower].kill_tree()
    port = brokers[leader].status()["metrics"]["port"]
    wait_for(lambda: value(scrape(port), "mpbroker_under_replicated_partitions") == 1, 30,
             what="one under-replicated partition")
    samples = scrape(port)
    assert sum(v for (name, _), v in samples.items() if name == "mpbroker_isr_shrinks_total") >= 1


def ctl_status_text(broker) -> str:
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "--socket", broker.socket_path, "status"],
                          capture_output=True, text=True, timeout=30).stdout


def test_default_replication_factor_creates_a_produced_topic_with_replicas(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, default_replication_factor=3, num_partitions=2)
    # The first produce is refused (no leader yet) and asks for the topic.
    assert produce(brokers[1].port, "auto", 1, [b"x"]).error == ErrorCode.NOT_LEADER
    wait_for(lambda: zk_client.exists(layout.topic_path("auto")), 10, what="the topic created")
    assignment = replication.parse_assignment("auto", zk_client.get(layout.topic_path("auto"))[0])
    assert sorted(assignment) == [0, 1] and all(len(replicas) == 3 for replicas in assignment.values())
    _, ack = produce_until_acked(zk_client, brokers, "auto", 1, [b"one"])
    leader, port = leader_port(zk_client, brokers, "auto", 1)
    assert read_all(port, "auto", 1) == [b"one"]
    assert not any(zk_client.exists(layout.topic_broker_path("auto", broker_id)) for broker_id in brokers)
