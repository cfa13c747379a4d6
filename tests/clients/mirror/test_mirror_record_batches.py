"""The mirror copying a topic that modern producers wrote on the source (record batches,
produced with confluent-kafka) into a 0.7 target: the values arrive as 0.7 messages, in
order, at the same position (keys and headers have no place in a 0.7 message)."""

from mpbroker.clients.mirror.mirror_maker import Mirror
from mpbroker.registry.layout import topic_path
from tests.clients.helpers import PARTITIONS, wait_for
from tests.clients.mirror.test_mirror import make_cluster, mirror_config
from tests.clients.modern import produce_modern, read_records, records, wait_readable

__all__ = ["make_cluster"]  # the fixture


def test_the_mirror_copies_the_values_of_a_modern_topic(make_cluster):
    source, target = make_cluster("a"), make_cluster("b")
    sent = records("mirrored", 600)
    produce_modern(source.broker, "modern-clicks", sent, compression="zstd", partition=None)
    wait_readable(source.broker.port, "modern-clicks", len(sent), range(PARTITIONS))
    # With ZooKeeper a topic a modern client makes is the controller's: its assignment names its partitions.
    wait_for(lambda: source.zk.exists(topic_path("modern-clicks")) and source.zk.get(topic_path("modern-clicks"))[0],
             15, 0.05, "the topic registered")
    mirror = Mirror(mirror_config([source], target, "modern-.*")).start()
    try:
        wait_for(lambda: len(target.read_all("modern-clicks")) >= len(sent), 30, 0.1, "modern-clicks mirrored")
    finally:
        assert mirror.stop()
    by_partition = read_records(source.broker.port, "modern-clicks", range(PARTITIONS))
    assert target.read("modern-clicks") == {p: [m.payload for m in got] for p, got in by_partition.items()}
    assert sorted(target.read_all("modern-clicks")) == sorted(v for _, v, _ in sent)
