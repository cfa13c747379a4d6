"""The modern groups' metrics without a broker: the acceptor's summary of its
coordinator (``acceptor/kafka/group_metrics.py``: only the groups loaded here, lag
where this broker has the partition's end, the caps on groups and partitions with what
they leave out counted) and the families the exporter makes of it
(``metrics/group_families.py``: names and labels, nothing from a stale snapshot)."""

import json

from mpbroker.acceptor.kafka import group_metrics
from mpbroker.group_coordinator import GroupCoordinator, OffsetAndMetadata
from mpbroker.ipc.group_snapshot import GroupSnapshot
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.metrics.group_families import STALE_MS, group_families
from tests.group_coordinator.helpers import join


class OffsetsTopic:
    def __init__(self, elsewhere=()):
        self.elsewhere = set(elsewhere)

    def loaded_here(self, group_id):
        return group_id not in self.elsewhere


class Reads:
    """Log ends: topic "here" has them (100 per partition), any other topic is led elsewhere."""

    def bounds(self, topic, partition):
        if topic == "here":
            return KafkaError.NONE, object(), None, 100 + partition
        return KafkaError.NOT_LEADER_OR_FOLLOWER, None, None, 0


def commit(coordinator, group, offsets: dict) -> None:
    assert coordinator.validate_commit(0, group, -1, "", None) == KafkaError.NONE
    coordinator.commit_done(group, {key: OffsetAndMetadata(offset, -1, "", 0) for key, offset in offsets.items()})


def test_the_summary_of_the_groups_loaded_here():
    coordinator = GroupCoordinator(initial_rebalance_delay_ms=0)
    commit(coordinator, "quiet", {("here", 0): 40, ("here", 1): 101, ("away", 0): 7})
    commit(coordinator, "moved", {("here", 0): 1})
    join(coordinator, 0, group="busy")
    coordinator.tick(10)
    summary = group_metrics.summary(coordinator, OffsetsTopic(elsewhere={"moved"}), Reads())
    assert summary["groups"] == 2 and summary["omitted_groups"] == 0 and summary["omitted_partitions"] == 0
    listed = {entry[0]: entry[1:] for entry in summary["list"]}
    assert set(listed) == {"busy", "quiet"}
    state, members, rows = listed["busy"]
    assert members == 1 and state in ("CompletingRebalance", "Stable", "PreparingRebalance") and rows == []
    state, members, rows = listed["quiet"]
    assert (state, members) == ("Empty", 0)
    assert rows == [["away", 0, 7, None], ["here", 0, 40, 60], ["here", 1, 101, 0]]  # lag: end - committed, >= 0


def test_the_caps_leave_the_rest_out_and_count_it(monkeypatch):
    monkeypatch.setattr(group_metrics, "MAX_GROUPS", 3)
    monkeypatch.setattr(group_metrics, "MAX_PARTITIONS", 5)
    coordinator = GroupCoordinator()
    for number in range(6):
        commit(coordinator, f"g{number}", {("here", partition): 1 for partition in range(2)})
    summary = group_metrics.summary(coordinator, OffsetsTopic(), Reads())
    assert summary["groups"] == 6 and summary["omitted_groups"] == 3
    assert [entry[0] for entry in summary["list"]] == ["g0", "g1", "g2"]  # the first by id
    assert [len(entry[3]) for entry in summary["list"]] == [2, 2, 1]
    assert summary["omitted_partitions"] == 1


def test_the_publisher_stores_the_summary_and_the_exporter_makes_families():
    coordinator = GroupCoordinator()
    commit(coordinator, "quiet", {("here", 0): 40, ("away", 0): 7})
    snapshot = GroupSnapshot(1 << 16)

    class Timers:
        def once(self, _delay, action):
            action(0)

        def every(self, _interval, _action):
            pass
    group_metrics.GroupMetricsPublisher(snapshot, coordinator, OffsetsTopic(), Reads(), Timers())
    data, published_ms = snapshot.read()
    assert json.loads(data)["groups"] == 1
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in group_families(snapshot, published_ms) for sample in family.samples}
    assert samples[("mpbroker_consumer_groups", ())] == 1
    assert samples[("mpbroker_consumer_groups_omitted", ())] == 0
    assert samples[("mpbroker_consumer_group_state", (("group", "quiet"), ("state", "Empty")))] == 1
    assert samples[("mpbroker_consumer_group_members", (("group", "quiet"),))] == 0
    here = (("group", "quiet"), ("partition", "0"), ("topic", "here"))
    away = (("group", "quiet"), ("partition", "0"), ("topic", "away"))
    assert samples[("mpbroker_consumer_group_committed_offset", here)] == 40
    assert samples[("mpbroker_consumer_group_committed_offset", away)] == 7
    assert samples[("mpbroker_consumer_group_lag", here)] == 60
    assert ("mpbroker_consumer_group_lag", away) not in samples, "no lag where the end is not known here"
    assert samples[("mpbroker_consumer_group_lag_sum", (("group", "quiet"),))] == 60
    assert list(group_families(snapshot, published_ms + STALE_MS + 1)) == [], "a stale snapshot says nothing"
    assert list(group_families(GroupSnapshot(4096))) == [] and list(group_families(None)) == []
