"""The modern consumer groups' metrics, from the snapshot the acceptor publishes
(``ipc/group_snapshot.py``, ``acceptor/kafka/group_metrics.py``): each broker reports
the groups it coordinates.

    mpbroker_consumer_groups                                        groups coordinated here
    mpbroker_consumer_groups_omitted                                of them, past the cap, not shown one by one
    mpbroker_consumer_group_state{group, state}                     1 (state: Empty, Stable, ...)
    mpbroker_consumer_group_members{group}
    mpbroker_consumer_group_committed_offset{group, topic, partition}
    mpbroker_consumer_group_lag{group, topic, partition}            log end readers see - committed
    mpbroker_consumer_group_lag_sum{group}                          over its partitions with a lag here
    mpbroker_consumer_group_partitions_omitted                      committed partitions past the cap

Lag is in offsets, byte positions here (roughly bytes, not records). A partition this
broker does not lead has no lag here (its committed offset is there). A snapshot older
than ``STALE_MS`` (the acceptor is down or stuck) is not reported: no group series.
"""

import json

from prometheus_client.core import GaugeMetricFamily

from mpbroker.clock import monotonic_ms
from mpbroker.ipc.group_snapshot import MAX_GROUPS, MAX_PARTITIONS

STALE_MS = 15000


def group_families(snapshot, now_ms: int | None = None):
    """The families of the latest fresh snapshot (none without one)."""
    latest = snapshot.read() if snapshot is not None else None
    if latest is None:
        return
    data, published_ms = latest
    if (monotonic_ms() if now_ms is None else now_ms) - published_ms > STALE_MS:
        return
    try:
        summary = json.loads(data)
    except ValueError:
        return
    yield GaugeMetricFamily("mpbroker_consumer_groups", "modern consumer groups this broker coordinates",
                            value=summary["groups"])
    yield GaugeMetricFamily("mpbroker_consumer_groups_omitted",
                            f"of them, groups past the cap (the first {MAX_GROUPS} by id are reported)",
                            value=summary["omitted_groups"])
    yield GaugeMetricFamily("mpbroker_consumer_group_partitions_omitted",
                            f"committed partitions past the cap ({MAX_PARTITIONS} in all) not reported",
                            value=summary["omitted_partitions"])
    state = GaugeMetricFamily("mpbroker_consumer_group_state", "1 for the group's state",
                              labels=["group", "state"])
    members = GaugeMetricFamily("mpbroker_consumer_group_members", "members of the group", labels=["group"])
    partition_labels = ["group", "topic", "partition"]
    committed = GaugeMetricFamily("mpbroker_consumer_group_committed_offset", "the group's committed offset",
                                  labels=partition_labels)
    lag = GaugeMetricFamily("mpbroker_consumer_group_lag",
                            "log end readers see minus the committed offset (offsets: byte positions), where this "
                            "broker leads the partition", labels=partition_labels)
    lag_sum = GaugeMetricFamily("mpbroker_consumer_group_lag_sum", "the group's lag over its partitions led here",
                                labels=["group"])
    for group, group_state, member_count, rows in summary["list"]:
        state.add_metric([group, group_state], 1)
        members.add_metric([group], member_count)
        total = 0
        for topic, partition, offset, partition_lag in rows:
            committed.add_metric([group, topic, str(partition)], offset)
            if partition_lag is not None:
                lag.add_metric([group, topic, str(partition)], partition_lag)
                total += partition_lag
        lag_sum.add_metric([group], total)
    yield from (state, members, committed, lag, lag_sum)
