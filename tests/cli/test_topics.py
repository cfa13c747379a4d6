"""``mpbroker-topics`` against three real brokers registered in a real ZooKeeper:
create (placement over the live brokers, refusals with nothing written), list and
describe (the leaders, epochs and ISRs the brokers' controller wrote; after SIGKILL of a
broker, --under-replicated), and a topic created the 0.7 way by a produce, which is not
a replicated topic."""

import pytest

from mpbroker.cli import topics
from mpbroker.clients import Producer
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions
from mpbroker.registry import layout
from mpbroker.registry.replication import PartitionState, parse_assignment, parse_topic_format, partition_state_path
from mpbroker.registry.topic_admin import PartitionInfo
from tests.clients.helpers import broker_list, wait_for
from tests.replication.cluster import produce as cluster_produce


@pytest.fixture
def cluster(broker_factory, zk_connect, zk_client):
    """Three brokers (ids 1, 2, 3) registered in ZooKeeper, and a client of our own."""
    brokers = [broker_factory(f"b{i}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=i,
                              zk_sessiontimeout_ms=4000) for i in (1, 2, 3)]
    wait_for(lambda: sorted(read_brokers(zk_client)) == [1, 2, 3], 20, what="three brokers registered")
    return zk_connect, zk_client, brokers


def produce(port: int, topic: str, partition: int, payloads):
    """A durability-2 produce's ack, or None if it was refused (e.g. the leader is not ready yet)."""
    ack = cluster_produce(port, topic, partition, payloads)
    return ack if ack.error == 0 else None


def run(capsys, zk_connect, *args) -> tuple:
    capsys.readouterr()
    code = topics.main(["--zookeeper", zk_connect, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_create_list_and_describe(cluster, capsys):
    zk_connect, client, brokers = cluster
    code, _, err = run(capsys, zk_connect, "create", "--topic", "t", "--partitions", "6", "--replication-factor", "4")
    assert code == 2 and "replication factor 4 needs 4 live brokers; 3 registered (1, 2, 3)" in err
    assert not client.exists(layout.topic_path("t"))  # nothing written

    code, out, _ = run(capsys, zk_connect, "create", "--topic", "t", "--partitions", "6", "--replication-factor", "3")
    assert code == 0 and "6 partitions, replication factor 3" in out
    value, _ = client.get(layout.topic_path("t"))
    assignment = parse_assignment("t", value)
    assert all(sorted(replicas) == [1, 2, 3] for replicas in assignment.values())
    assert sorted(replicas[0] for replicas in assignment.values()) == [1, 1, 2, 2, 3, 3]  # leaders balanced

    code, _, err = run(capsys, zk_connect, "create", "--topic", "t", "--partitions", "1", "--replication-factor", "1")
    assert code == 1 and "exists already" in err
    code, _, err = run(capsys, zk_connect, "create", "--topic", "no/slash", "--partitions", "1",
                       "--replication-factor", "1")
    assert code == 2 and "no/slash" in err

    code, out, _ = run(capsys, zk_connect, "list")
    assert code == 0 and out.split() == ["t"]
    # The controller (in one of the brokers) elects the preferred replicas.
    wait_for(lambda: run(capsys, zk_connect, "describe", "--topic", "t")[1].count("leader_epoch: 0") == 6, 20,
             what="every partition led")
    wait_for(lambda: run(capsys, zk_connect, "describe", "--topic", "t")[1].count("high_watermark: 0") == 6, 20,
             what="every leader knows it leads")
    code, out, _ = run(capsys, zk_connect, "describe", "--topic", "t")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    replicas = ",".join(map(str, assignment[0]))
    assert lines[0] == (f"topic: t\tpartition: 0\tleader: {assignment[0][0]}\tleader_epoch: 0"
                        f"\treplicas: {replicas}\tisr: {replicas}\thigh_watermark: 0")
    # The high watermark is the leader's: after a replicated produce, its end.
    leader_port = brokers[assignment[0][0] - 1].port
    ack = wait_for(lambda: produce(leader_port, "t", 0, [b"one", b"two"]), 20, what="a replicated produce")
    code, out, _ = run(capsys, zk_connect, "describe", "--topic", "t")
    assert out.splitlines()[0].endswith(f"\thigh_watermark: {ack.next_offset}")
    code, out, _ = run(capsys, zk_connect, "describe", "--under-replicated")
    assert code == 0 and out == ""

    brokers[2].kill_tree()  # broker 3: its session ends, the controller shrinks the ISRs
    wait_for(lambda: len(run(capsys, zk_connect, "describe", "--under-replicated")[1].splitlines()) == 6, 30,
             what="six under-replicated partitions")
    code, out, _ = run(capsys, zk_connect, "describe", "--topic", "t", "--under-replicated")
    assert code == 0 and all("3" not in line.split("\tisr: ")[1] for line in out.splitlines())

    code, _, err = run(capsys, zk_connect, "describe", "--topic", "missing")
    assert code == 2 and "no topic 'missing'" in err


def test_a_topic_created_by_a_produce_is_not_replicated(cluster, capsys, caplog):
    zk_connect, client, brokers = cluster
    with Producer(broker_list=broker_list(brokers[0])) as producer:
        producer.send("old", [b"one"])
    wait_for(lambda: client.exists(layout.topic_broker_path("old", 1)), 20, what="'old' registered by broker 1")
    run(capsys, zk_connect, "create", "--topic", "new", "--partitions", "2", "--replication-factor", "2")
    code, out, _ = run(capsys, zk_connect, "list")
    assert code == 0 and out.split() == ["new"]
    code, _, err = run(capsys, zk_connect, "describe", "--topic", "old")
    assert code == 2 and "created the 0.7 way" in err
    # The 0.7 reader of a replicated topic's node skips its partition states, silently.
    wait_for(lambda: client.exists(partition_state_path("new", 0)), 20, what="the controller's state of new-0")
    caplog.clear()
    assert read_topic_partitions(client, "new") == []
    assert not [record for record in caplog.records if "partitions" in record.getMessage()]
    assert [p.broker_id for p in read_topic_partitions(client, "old")] == [1] * 4


def test_create_with_record_batches(zk_connect, zk_client, capsys):
    """A replicated topic for modern clients: its format is in the assignment node."""
    for broker in (1, 2):  # registered brokers are all create needs
        zk_client.create(layout.broker_path(broker), f"b{broker}:127.0.0.1:{9090 + broker}".encode(),
                         ephemeral=True, makepath=True)
    code, out, _ = run(capsys, zk_connect, "create", "--topic", "modern", "--partitions", "2",
                       "--replication-factor", "2", "--record-batches")
    assert code == 0 and "2 partitions, replication factor 2, record batches" in out
    value, _ = zk_client.get(layout.topic_path("modern"))
    assert parse_topic_format("modern", value) is True and len(parse_assignment("modern", value)) == 2
    code, out, _ = run(capsys, zk_connect, "create", "--topic", "old", "--partitions", "1", "--replication-factor", "2")
    assert code == 0 and "record batches" not in out
    assert parse_topic_format("old", zk_client.get(layout.topic_path("old"))[0]) is False


def test_no_zookeeper_is_exit_3(capsys):
    code, _, err = run(capsys, "127.0.0.1:1", "--zk-timeout-ms", "500", "list")
    assert code == 3 and "no ZooKeeper answered" in err


def test_describe_shows_dashes_until_a_controller_wrote_a_state():
    lines = topics._describe_lines([PartitionInfo("t", 0, [2, 1], None),
                                    PartitionInfo("t", 1, [1, 2], PartitionState(-1, 4, (1,), 2))], False)
    assert lines == ["topic: t\tpartition: 0\tleader: -\tleader_epoch: -\treplicas: 2,1\tisr: -\thigh_watermark: -",
                     "topic: t\tpartition: 1\tleader: -\tleader_epoch: 4\treplicas: 1,2\tisr: 1\thigh_watermark: -"]
    assert topics._describe_lines([PartitionInfo("t", 0, [1], PartitionState(1, 0, (1,), 1))], True) == []


def test_config_options_are_checked_as_create_topics_checks_them():
    assert topics._configs(["retention.ms=60000", "segment.bytes = 2048"]) == {"retention.ms": "60000",
                                                                                "segment.bytes": "2048"}
    for bad, complaint in ((["retention.ms"], "give KEY=VALUE"), (["retention.ms=soon"], "not a whole number"),
                           (["cleanup.policy=compact"], "compaction is not done here")):
        with pytest.raises(ValueError, match=complaint):
            topics._configs(bad)
    assert topics._configs_line("t", {"segment.bytes": "2048", "flush.ms": "10"}) == \
        "topic: t\tconfigs: flush.ms=10,segment.bytes=2048"
