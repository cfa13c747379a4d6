"""The acceptor's side of the modern groups' metrics: every ``PUBLISH_MS`` a summary of
the groups this broker coordinates (with their commits loaded) goes into the shared
``GroupSnapshot`` (``ipc/group_snapshot.py``) for the metrics exporter.

Per group: its state, its number of members, and per committed partition the committed
offset and the lag (the end readers see minus the committed offset, as ListOffsets
latest and a consumer see it), where this broker has that end: the partitions it holds
unreplicated or leads; for the others (led by another broker of a cluster) the lag is
left out and the committed offset is still there (the leader's broker exports
``mpbroker_partition_high_watermark``, so a query can join them).

Within the caps of ``ipc/group_snapshot.py`` (``MAX_GROUPS`` groups, the first by id;
``MAX_PARTITIONS`` committed partitions in all), what is left out counted. Only built
when ``metrics.enable`` is on: nothing is done otherwise.
"""

import json
import logging

from mpbroker.clock import monotonic_ms
from mpbroker.ipc.group_snapshot import MAX_GROUPS, MAX_PARTITIONS

log = logging.getLogger(__name__)

PUBLISH_MS = 2000


def summary(coordinator, offsets_topic, reads) -> dict:
    """``{"groups": count, "omitted_groups", "omitted_partitions", "list": [[group id,
    state, members, [[topic, partition, committed, lag or None], ...]], ...]}``."""
    groups = sorted(listing.group_id for listing in coordinator.list_groups()
                    if offsets_topic.loaded_here(listing.group_id))
    shown, room, omitted_partitions = [], MAX_PARTITIONS, 0
    for group_id in groups[:MAX_GROUPS]:
        described = coordinator.describe(group_id)
        committed = sorted(coordinator.committed(group_id, None).items())
        rows = []
        for (topic, partition), offset in committed[:room]:
            rows.append([topic, partition, offset.offset, _lag(reads, topic, partition, offset.offset)])
        omitted_partitions += len(committed) - len(rows)
        room -= len(rows)
        shown.append([group_id, described.state, len(described.members), rows])
    return {"groups": len(groups), "omitted_groups": max(0, len(groups) - MAX_GROUPS),
            "omitted_partitions": omitted_partitions, "list": shown}


def _lag(reads, topic: str, partition: int, committed: int):
    if committed < 0:
        return None
    error, view, _, end = reads.bounds(topic, partition)
    if error or view is None:
        return None
    return max(0, end - committed)


class GroupMetricsPublisher:
    """Publishes ``summary`` into ``snapshot`` on a timer of the acceptor's loop."""

    def __init__(self, snapshot, coordinator, offsets_topic, reads, timers):
        self._snapshot = snapshot
        self._coordinator = coordinator
        self._offsets_topic = offsets_topic
        self._reads = reads
        self._too_large = False
        timers.once(0, self.publish)
        timers.every(PUBLISH_MS, self.publish)

    def publish(self, _now_ms: int = 0) -> None:
        data = json.dumps(summary(self._coordinator, self._offsets_topic, self._reads),
                          separators=(",", ":")).encode()
        if not self._snapshot.publish(data, monotonic_ms()) and not self._too_large:
            self._too_large = True  # long names under the caps: said once
            log.warning("the consumer groups' metrics snapshot (%d bytes) exceeds its %d bytes: not published",
                        len(data), self._snapshot.capacity)
