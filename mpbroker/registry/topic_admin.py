"""Creating and reading replicated topics in ZooKeeper, for ``mpbroker-topics``.

Creating writes one node, ``/brokers/topics/<topic>`` with the assignment
(``replication``), in one ZooKeeper operation: a topic either exists with all its
partitions placed or not at all. The placement is made over the brokers registered
at that moment (``/brokers/ids``); too few of them for the replication factor is an
error and nothing is written. A topic that exists already, replicated or created the
0.7 way by a produce, is an error too. The partitions' states (leader, epoch, ISR) are
written by the controller; until it has, a partition shows no leader.
"""

from typing import NamedTuple

from kazoo.exceptions import NodeExistsError, NoNodeError

from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout, replication
from mpbroker.registry.replication import PartitionState, assign_replicas


class TopicExists(Exception):
    """The topic is in ZooKeeper already."""


class UnknownTopic(Exception):
    """No replicated topic of that name."""


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    replicas: list
    state: PartitionState | None  # None: no controller has written one yet

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (no state yet counts: nothing is in sync)."""
        return self.state is None or len(self.state.isr) < len(self.replicas)


def live_brokers(client) -> list:
    """The ids registered under /brokers/ids, sorted."""
    try:
        names = client.get_children(layout.BROKER_IDS)
    except NoNodeError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def create_topic(client, topic: str, partitions: int, replication_factor: int, record_batches: bool = False) -> dict:
    """Place and write a replicated topic; returns its assignment. With ``record_batches``
    its logs hold record batches (a topic for modern clients), else 0.7 messages.
    InvalidTopicError, PlacementError (too few brokers, bad counts) or TopicExists, with
    nothing written."""
    check_topic(topic)
    assignment = assign_replicas(live_brokers(client), partitions, replication_factor)
    client.ensure_path(layout.BROKER_TOPICS)
    try:
        client.create(layout.topic_path(topic), replication.assignment_value(assignment, record_batches))
    except NodeExistsError:
        raise TopicExists(f"topic {topic!r} exists already") from None
    return assignment


def topic_names(client) -> list:
    """Every topic under /brokers/topics, replicated or not, sorted."""
    try:
        return sorted(client.get_children(layout.BROKER_TOPICS))
    except NoNodeError:
        return []


def replicated_topics(client) -> list:
    """The names of the topics that have an assignment, sorted."""
    topics = []
    for name in topic_names(client):
        try:
            value, _ = client.get(layout.topic_path(name))
        except NoNodeError:
            continue
        if value:
            topics.append(name)
    return topics


def describe_topic(client, topic: str) -> list:
    """A PartitionInfo per partition of ``topic``; UnknownTopic if it has no assignment
    (LayoutError if its nodes do not parse)."""
    try:
        value, _ = client.get(layout.topic_path(topic))
    except NoNodeError:
        raise UnknownTopic(f"no topic {topic!r}") from None
    assignment = replication.parse_assignment(topic, value)
    if assignment is None:
        raise UnknownTopic(f"topic {topic!r} was created the 0.7 way (by a produce): it has no replicas")
    partitions = []
    for partition, replicas in sorted(assignment.items()):
        try:
            state_value, _ = client.get(replication.partition_state_path(topic, partition))
            state = replication.parse_partition_state(topic, partition, state_value)
        except NoNodeError:
            state = None
        partitions.append(PartitionInfo(topic, partition, replicas, state))
    return partitions
