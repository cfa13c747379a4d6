"""The console tools with ``--zookeeper`` and a replicated topic, on three real brokers
and their controller: the console producer's lines at each partition's leader
(``--acks replicated``), the console consumer reading them back as a group member
(``<partition>`` printed), ``mpbroker-get-offsets`` asking the leaders (and, for a
topic created the 0.7 way, the brokers that registered it)."""

import io

import pytest

from mpbroker.cli import console_consumer, console_producer, get_offsets
from mpbroker.clients import LeaderConsumer, Producer
from mpbroker.registry import layout
from tests.clients.helpers import broker_list, wait_for
from tests.clients.replicated import Cluster


@pytest.fixture
def cluster(broker_factory, zk_connect):
    cluster = Cluster(broker_factory, zk_connect)
    yield cluster
    cluster.close()


def test_console_tools_on_a_replicated_topic(cluster, capsys):
    assignment = cluster.create("r", 2, 2)
    lines = b"".join(b"k%d\tline-%d\n" % (n, n) for n in range(8))
    code = console_producer.main(["--zookeeper", cluster.zk_connect, "--topic", "r", "--acks", "replicated",
                                  "--sync", "--key-separator", "\t"], stdin=io.BytesIO(lines))
    assert code == 0
    with LeaderConsumer(cluster.zk_connect) as consumer:  # fetchable once flushed (every 20 ms here)
        wait_for(lambda: sum(len(list(consumer.messages("r", p, 0))) for p in (0, 1)) == 8, 10, what="8 flushed")
        stored = {p: [m.payload for m in consumer.messages("r", p, 0)] for p in (0, 1)}
        ends = {p: consumer.latest_offset("r", p) for p in (0, 1)}
    assert sorted(stored[0] + stored[1]) == sorted(b"line-%d" % n for n in range(8))
    for partition in (0, 1):  # on the leader (and its follower): on no broker outside the assignment
        assert cluster.has_log(cluster.leader("r", partition), "r", partition) == bool(stored[partition])
        assert not any(cluster.has_log(b, "r", partition) for b in cluster.brokers if b not in assignment[partition])

    out = io.BytesIO()
    code = console_consumer.main(["--zookeeper", cluster.zk_connect, "--topic", "r", "--from-beginning",
                                  "--print-partition", "--max-messages", "8", "--timeout-ms", "15000"], stdout=out)
    assert code == 0
    printed = sorted(out.getvalue().splitlines())
    assert printed == sorted(b"%d\t%s" % (p, payload) for p in (0, 1) for payload in stored[p])

    capsys.readouterr()
    assert get_offsets.main(["--zookeeper", cluster.zk_connect, "--topic", "r"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"r:0:{ends[0]}", f"r:1:{ends[1]}"]
    assert get_offsets.main(["--zookeeper", cluster.zk_connect, "--topic", "r", "--partition", "1", "--time",
                             "-2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["r:1:0"]
    assert get_offsets.main(["--zookeeper", cluster.zk_connect, "--topic", "r", "--partition", "2"]) == 2
    assert "does not exist (it has partitions 0-1)" in capsys.readouterr().err


def test_get_offsets_with_zookeeper_for_a_0_7_topic(cluster, capsys):
    with Producer(broker_list=broker_list(cluster.brokers[2]), acks="flush") as producer:
        producer.send("old", [b"x"], key=b"k")
    wait_for(lambda: cluster.client.exists(layout.topic_broker_path("old", 2)), 20, what="old registered")
    capsys.readouterr()
    assert get_offsets.main(["--zookeeper", cluster.zk_connect, "--topic", "old", "--partition", "0"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("old:2-0:")
    assert get_offsets.main(["--zookeeper", cluster.zk_connect, "--topic", "olx"]) == 2
    assert "unknown topic 'olx' (did you mean 'old'?)" in capsys.readouterr().err
