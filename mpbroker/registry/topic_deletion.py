"""Deleting a topic from a ZooKeeper cluster (Kafka's ``/admin/delete_topics`` layout),
for the registrars, the controller and ``mpbroker-topics delete``.

    /admin/delete_topics/<topic>             the topic is to be deleted (persistent, empty)
    /admin/delete_topics/<topic>/<broker>    that broker has deleted its logs of it

Anyone may mark a topic that is under ``/brokers/topics`` (``mark``). Every broker's
registrar, seeing the mark, stops registering and replicating the topic, deletes its
own logs of it and says so (``report_done``). The controller removes the topic,
its assignment, partition states and 0.7 registrations with it, once every broker
that must has said so (``must_report``: its replicas, the live brokers, any broker
still registered under it), and then the mark. A topic is gone for the cluster when
``/brokers/topics/<topic>`` is (``gone``).
"""

from kazoo.exceptions import NodeExistsError, NoNodeError

from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout, replication

ADMIN_DELETE_TOPICS = "/admin/delete_topics"


class UnknownTopic(Exception):
    """No topic of that name under /brokers/topics."""


def marker_path(topic: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{check_topic(topic)}"


def done_path(topic: str, broker_id: int) -> str:
    return f"{marker_path(topic)}/{int(broker_id)}"


def mark(client, topic: str) -> None:
    """Mark ``topic`` for deletion (marked already is fine); UnknownTopic if the
    cluster has no such topic (InvalidTopicError for a bad name)."""
    path = marker_path(topic)
    if client.exists(layout.topic_path(topic)) is None:
        raise UnknownTopic(f"no topic {topic!r}")
    client.ensure_path(ADMIN_DELETE_TOPICS)
    try:
        client.create(path, b"")
    except NodeExistsError:
        pass


def marked(client) -> list:
    """The topics marked for deletion, sorted."""
    try:
        return sorted(client.get_children(ADMIN_DELETE_TOPICS))
    except NoNodeError:
        return []


def report_done(client, topic: str, broker_id: int) -> None:
    """This broker has deleted its logs of ``topic`` (nothing if the mark is gone)."""
    try:
        client.create(done_path(topic, broker_id), b"")
    except (NodeExistsError, NoNodeError):
        pass


def reported(client, topic: str) -> set:
    """The brokers that deleted their logs of ``topic``."""
    try:
        return {int(name) for name in client.get_children(marker_path(topic)) if name.isdigit()}
    except NoNodeError:
        return set()


def must_report(client, topic: str, live_brokers) -> set | None:
    """The brokers whose report the removal of ``topic`` waits for: its replicas (a
    replica on a broker that is down is deleted when it is back, as Kafka waits), the
    live brokers, and any broker registered under the topic. None if the topic is gone
    already. LayoutError if its assignment does not parse."""
    try:
        value, _ = client.get(layout.topic_path(topic))
        children = client.get_children(layout.topic_path(topic))
    except NoNodeError:
        return None
    assignment = replication.parse_assignment(topic, value) or {}
    brokers = {broker for replicas in assignment.values() for broker in replicas}
    brokers.update(int(name) for name in children if name.isdigit())
    return brokers | set(live_brokers)


def remove(client, topic: str) -> None:
    """Remove ``topic`` from the cluster: its node with everything under it, then its mark."""
    try:
        client.delete(layout.topic_path(topic), recursive=True)
    except NoNodeError:
        pass
    unmark(client, topic)


def unmark(client, topic: str) -> None:
    try:
        client.delete(marker_path(topic), recursive=True)
    except NoNodeError:
        pass


def gone(client, topic: str) -> bool:
    """Whether the cluster's topic listing lacks ``topic``."""
    return client.exists(layout.topic_path(topic)) is None
