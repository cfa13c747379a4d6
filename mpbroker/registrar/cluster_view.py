"""What the modern listener tells clients about the cluster, read from ZooKeeper: the
live brokers' modern endpoints and every replicated topic's partitions (leader, leader
epoch, replicas, in-sync replicas), plus the controller.

The acceptor answers Metadata but does not talk to ZooKeeper (kazoo runs threads; the
acceptor is a single-threaded event loop), so the registrar reads this every
``REFRESH_S`` and sends it (``Op.CLUSTER``, through the supervisor) whenever it
changed. A client may thus see a leader change up to about a second late: it then
gets NOT_LEADER_OR_FOLLOWER from the old leader, asks Metadata again and moves on, as
it does with Kafka.
"""

import json
import logging
import time

from kazoo.exceptions import NoNodeError

from mpbroker.registry import endpoints, replication
from mpbroker.registry.layout import LayoutError, topic_path
from mpbroker.registry.topic_admin import topic_names

log = logging.getLogger(__name__)

REFRESH_S = 1.0
MAX_MESSAGE_PARTITIONS = 20_000  # what one control message carries (about 1 MB of JSON at most)


class ClusterView:
    def __init__(self, client, send):
        self.client = client
        self._send = send  # callable(**fields): an Op.CLUSTER message
        self._last = None
        self._next = 0.0
        self.deleting = set()  # topics marked for deletion: left out

    def forget(self) -> None:
        """Send the view again at the next step (a respawned acceptor has none)."""
        self._last = None
        self._next = 0.0

    def step(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + REFRESH_S
        view = self.read()
        if view != self._last:
            self._send(**view)
            self._last = view

    def read(self) -> dict:
        """``{"brokers": [[id, host, port], ...], "controller": id, "topics": {topic:
        [[partition, leader, leader epoch, replicas, isr], ...]}}``. ZooKeeper errors propagate."""
        brokers = []
        try:
            ids = self.client.get_children(endpoints.ENDPOINTS)
        except NoNodeError:
            ids = []
        for name in sorted(ids, key=lambda text: int(text) if text.isdigit() else -1):
            try:
                value, _ = self.client.get(endpoints.endpoint_path(int(name)))
                brokers.append([int(name), *endpoints.parse_endpoint(name, value)])
            except (NoNodeError, ValueError, LayoutError):
                continue
        topics = {}
        count = 0
        for topic in topic_names(self.client):
            if topic in self.deleting:
                continue
            try:
                value, _ = self.client.get(topic_path(topic))
                assignment = replication.parse_assignment(topic, value)
            except (NoNodeError, LayoutError):
                continue
            if assignment is None:
                continue
            partitions = []
            for partition, replicas in sorted(assignment.items()):
                count += 1
                if count > MAX_MESSAGE_PARTITIONS:
                    break
                leader, epoch, isr = replication.NO_LEADER, -1, []
                try:
                    state_value, _ = self.client.get(replication.partition_state_path(topic, partition))
                    state = replication.parse_partition_state(topic, partition, state_value)
                    leader, epoch, isr = state.leader, state.leader_epoch, list(state.isr)
                except (NoNodeError, LayoutError):
                    pass
                partitions.append([partition, leader, epoch, list(replicas), isr])
            topics[topic] = partitions
        if count > MAX_MESSAGE_PARTITIONS:
            log.warning("the cluster has %d replicated partitions; modern clients are told of the first %d",
                        count, MAX_MESSAGE_PARTITIONS)
        return {"brokers": brokers, "controller": self._controller(), "topics": topics}

    def _controller(self) -> int:
        try:
            value, _ = self.client.get(replication.CONTROLLER)
            return int(json.loads(value)["brokerid"])
        except (NoNodeError, ValueError, TypeError, KeyError):
            return -1
