"""``mpbroker-topics`` against three real brokers registered in a real ZooKeeper:
create (placement over the live brokers, refusals with nothing written), list and
describe (leaders, epochs, replicas, ISR; --under-replicated), and a topic created the
0.7 way by a produce, which is not a replicated topic."""

import pytest

from mpbroker.cli import topics
from mpbroker.clients import Producer
from mpbroker.clients.core.zk_registry import read_brokers, read_topic_partitions
from mpbroker.registry import layout
from mpbroker.registry.replication import PartitionState, parse_assignment, partition_state_path
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import broker_list, wait_for


@pytest.fixture
def cluster(broker_factory, zk_connect):
    """Three brokers (ids 1, 2, 3) registered in ZooKeeper, and a client of our own."""
    brokers = [broker_factory(f"b{i}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=i) for i in (1, 2, 3)]
    client = start_client(zk_connect, 6000, 30_000)
    wait_for(lambda: sorted(read_brokers(client)) == [1, 2, 3], 20, what="three brokers registered")
    yield zk_connect, client, brokers
    close_client(client)


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
    code, out, _ = run(capsys, zk_connect, "describe", "--topic", "t")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    assert lines[0].startswith("topic: t\tpartition: 0\tleader: -\tleader_epoch: -\treplicas: ")
    assert lines[0].endswith("\tisr: -")  # no controller has written a state yet

    # Partition 0's state as a controller writes it: in sync; the others are not (yet).
    replicas = assignment[0]
    client.create(partition_state_path("t", 0), PartitionState(replicas[0], 3, tuple(replicas), 1).value(),
                  makepath=True)
    code, out, _ = run(capsys, zk_connect, "describe", "--topic", "t", "--under-replicated")
    assert code == 0 and [line.split("\t")[1] for line in out.splitlines()] == [
        f"partition: {p}" for p in range(1, 6)]
    code, out, _ = run(capsys, zk_connect, "describe")
    first = out.splitlines()[0]
    assert f"leader: {replicas[0]}\tleader_epoch: 3" in first and f"isr: {','.join(map(str, replicas))}" in first

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
    client.create(partition_state_path("new", 0), PartitionState(1, 0, (1,), 1).value(), makepath=True)
    caplog.clear()
    assert read_topic_partitions(client, "new") == []
    assert not [record for record in caplog.records if "partitions" in record.getMessage()]
    assert [p.broker_id for p in read_topic_partitions(client, "old")] == [1] * 4


def test_no_zookeeper_is_exit_3(capsys):
    code, _, err = run(capsys, "127.0.0.1:1", "--zk-timeout-ms", "500", "list")
    assert code == 3 and "no ZooKeeper answered" in err
