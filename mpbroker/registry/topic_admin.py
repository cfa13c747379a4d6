"""Creating and reading replicated topics in ZooKeeper, for ``mpbroker-topics`` and the
registrar.

Creating writes two nodes in one ZooKeeper transaction: the topic's settings,
``/config/topics/<topic>`` (``topic_config_nodes``; empty when it has none, as Kafka
wrote it), and ``/brokers/topics/<topic>`` with the assignment (``replication``): a
topic either exists with all its partitions placed and its settings or not at all,
and no broker ever reads the assignment without the settings. The placement is made over the brokers registered
at that moment (``/brokers/ids``); too few of them for the replication factor is an
error and nothing is written. A topic that exists already, replicated or created the
0.7 way by a produce, is an error too. The partitions' states (leader, epoch, ISR) are
written by the controller; until it has, a partition shows no leader.
"""

from typing import NamedTuple

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout, replication, topic_config_nodes
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


def create_topic(client, topic: str, partitions: int, replication_factor: int, record_batches: bool = False,
                 configs: dict | None = None) -> dict:
    """Place and write a replicated topic with its settings (``configs``, Kafka's
    topic-level names -> text, checked by the caller); returns its assignment. With
    ``record_batches`` its logs hold record batches (a topic for modern clients), else
    0.7 messages. InvalidTopicError, PlacementError (too few brokers, bad counts) or
    TopicExists, with nothing written."""
    check_topic(topic)
    assignment = assign_replicas(live_brokers(client), partitions, replication_factor)
    write_topic(client, topic, assignment, record_batches, configs)
    return assignment


def write_topic(client, topic: str, assignment: dict, record_batches: bool = False,
                configs: dict | None = None) -> None:
    """Write the settings node and the assignment node of ``topic`` in one transaction
    (a settings node left behind by an older topic of that name is replaced).
    TopicExists, with nothing written, if the assignment node exists."""
    client.ensure_path(layout.BROKER_TOPICS)
    client.ensure_path(topic_config_nodes.CONFIG_TOPICS)
    settings_path = topic_config_nodes.config_path(topic)
    settings = topic_config_nodes.config_value(configs or {})
    for _ in range(3):  # a settings node made or removed between the look and the commit: look again
        transaction = client.transaction()
        if client.exists(settings_path) is None:
            transaction.create(settings_path, settings)
        else:
            transaction.set_data(settings_path, settings)
        transaction.create(layout.topic_path(topic), replication.assignment_value(assignment, record_batches))
        settings_result, topic_result = transaction.commit()
        if isinstance(topic_result, NodeExistsError):
            raise TopicExists(f"topic {topic!r} exists already")
        if not isinstance(settings_result, Exception) and not isinstance(topic_result, Exception):
            return
        if not isinstance(settings_result, (NodeExistsError, NoNodeError)):
            raise topic_result if isinstance(settings_result, RolledBackError) else settings_result
    raise TopicExists(f"topic {topic!r}: its settings node keeps changing; is it being created elsewhere?")


def topic_config(client, topic: str, watch=None) -> dict:
    """The topic's own settings ``{name: value text}`` (empty: none, or no settings node).
    ``watch``: a kazoo watch on the node (its creation, change or removal). LayoutError if
    the node does not parse."""
    path = topic_config_nodes.config_path(topic)
    if client.exists(path, watch=watch) is None:
        return {}
    try:
        value, _ = client.get(path)
    except NoNodeError:
        return {}
    return topic_config_nodes.parse_config(topic, value)


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
