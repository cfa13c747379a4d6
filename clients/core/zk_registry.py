"""Reading the cluster from ZooKeeper, for the clients: which brokers are registered
(``/brokers/ids``) and which partitions a topic has on them (``/brokers/topics``).

Plain reads on a started kazoo client; the callers (the producer's discovery, the
consumer connector, the group report) set their own watches. A malformed node is
logged and left out rather than failing the read.
"""

import logging

from kazoo.exceptions import NoNodeError

from mpbroker.registry import layout
from mpbroker.registry.replication import PARTITIONS_CHILD

log = logging.getLogger(__name__)


def children(client, path: str) -> list:
    """The sorted children of ``path``; none when it does not exist."""
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def read_brokers(client, watch=None) -> dict:
    """``{broker id: BrokerInfo}`` of every registered broker."""
    try:
        ids = client.get_children(layout.BROKER_IDS, watch=watch)
    except NoNodeError:
        if watch is not None:
            client.exists(layout.BROKER_IDS, watch=watch)
        return {}
    brokers = {}
    for name in ids:
        try:
            data, _ = client.get(f"{layout.BROKER_IDS}/{name}")
            info = layout.parse_broker(int(name), data)
        except NoNodeError:
            continue  # gone between the two reads
        except (ValueError, layout.LayoutError) as exc:
            log.warning("ignoring broker registration %s: %s", name, exc)
            continue
        brokers[info.id] = info
    return brokers


def read_topics(client, watch=None) -> list:
    """Every topic some broker registered, sorted."""
    try:
        return sorted(client.get_children(layout.BROKER_TOPICS, watch=watch))
    except NoNodeError:
        if watch is not None:
            client.exists(layout.BROKER_TOPICS, watch=watch)
        return []


def read_topic_partitions(client, topic: str, watch=None) -> list:
    """The sorted PartitionIds of ``topic``: for each broker registered under
    ``/brokers/topics/<topic>``, partitions 0 .. count-1."""
    path = layout.topic_path(topic)
    try:
        broker_ids = client.get_children(path, watch=watch)
    except NoNodeError:
        if watch is not None:
            client.exists(path, watch=watch)
        return []
    partitions = []
    for name in broker_ids:
        if name == PARTITIONS_CHILD:  # a replicated topic's partition states, not a broker
            continue
        try:
            broker_id = int(name)
            data, _ = client.get(f"{path}/{name}")
            count = layout.parse_partition_count(topic, name, data)
        except NoNodeError:
            continue
        except (ValueError, layout.LayoutError) as exc:
            log.warning("ignoring %s/%s: %s", path, name, exc)
            continue
        partitions.extend(layout.PartitionId(broker_id, p) for p in range(count))
    return sorted(partitions)
