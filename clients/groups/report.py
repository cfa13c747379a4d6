"""What a consumer group is doing, read from ZooKeeper and the brokers: its members and
their subscriptions, and per topic and partition the owning stream, the committed
offset, the broker's log end and the lag between them.

    report = describe_group("zk:2181/chroot", "loaders")
    report["members"]   # [{"consumer_id", "subscription", "streams", "owned"}, ...]
    report["topics"]    # [{"topic", "lag", "lag_complete", "lag_messages_estimate",
                        #   "partitions": [{"broker_id", "partition", "node", "owner",
                        #    "committed_offset", "log_end_offset", "lag",
                        #    "lag_messages_estimate", "lag_messages_exact",
                        #    "registered"}, ...]}, ...]
    report["lag"], report["lag_complete"], report["lag_messages_estimate"], report["notes"]
    list_groups("zk:2181/chroot")  # ["loaders", ...]

The reads follow PROTOCOL.md's layout (``mpbroker.registry.layout``) and change
nothing: no chroot is created, no node written. The partitions reported for a topic
are those the brokers register now plus those the group has an owner or an offset
for (a partition of a broker that is gone keeps its committed offset). The log end
is OFFSETS latest (the flushed end) from the broker holding the partition; a broker
that is not registered or cannot be reached gives None, as does a partition without
a committed offset for the lag. Offsets are byte positions, so the lag is in bytes.
A topic's and the group's ``lag`` add up the lags that are known; ``lag_complete``
says whether every partition's is. ``lag_messages_estimate`` is the lag in messages,
from one fetch at the committed offset (``mpbroker.clients.groups.lag_estimate``): counted when that
fetch reached the log end (``lag_messages_exact``), else scaled from its bytes per
message; the topic's and the group's add up the partitions' that are known. Why a
value is missing is said in ``notes``.
"""


from kazoo.exceptions import NoNodeError

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import BrokerError, BrokerUnavailableError, ClientError
from mpbroker.clients.core.leaders import REPLICATED, parse_partition_node, registered_partitions
from mpbroker.clients.core.zk_registry import children, read_brokers, read_topics
from mpbroker.clients.groups.lag_estimate import lag_messages
from mpbroker.codec.errors import InvalidTopicError, MPBrokerError
from mpbroker.registry import layout
from mpbroker.registry.zk_client import close_client, start_client

ZK_TIMEOUT_MS = 6000  # how long to wait for a ZooKeeper server to answer (0.7's zk.connectiontimeout.ms)
BROKER_TIMEOUT_MS = 3000  # connect and answer timeout for each broker's OFFSETS requests
SESSION_TIMEOUT_MS = 10000


class GroupNotFound(LookupError):
    """ZooKeeper has no ``/consumers/<group>``."""


def connect(zk_connect: str, timeout_ms: int = ZK_TIMEOUT_MS):
    """A started kazoo client for reading (the chroot is not created), or
    ZooKeeperUnavailable after ``timeout_ms``."""
    return start_client(zk_connect, SESSION_TIMEOUT_MS, timeout_ms, create_chroot=False)


def list_groups(zk_connect: str, *, zk_timeout_ms: int = ZK_TIMEOUT_MS) -> list:
    """The sorted names of the consumer groups in ZooKeeper."""
    client = connect(zk_connect, zk_timeout_ms)
    try:
        return read_group_names(client)
    finally:
        close_client(client)


def summarize_groups(zk_connect: str, *, zk_timeout_ms: int = ZK_TIMEOUT_MS) -> list:
    """``[{"group", "members", "topics"}, ...]``: every group, its member count and the
    topics it has owners or offsets for."""
    client = connect(zk_connect, zk_timeout_ms)
    try:
        return [group_summary(client, group) for group in read_group_names(client)]
    finally:
        close_client(client)


def describe_group(zk_connect: str, group: str, *, zk_timeout_ms: int = ZK_TIMEOUT_MS,
                   broker_timeout_ms: int = BROKER_TIMEOUT_MS) -> dict:
    """The report of ``group`` (see the module's docstring); GroupNotFound if ZooKeeper
    has no such group, ZooKeeperUnavailable if no server answered."""
    layout.check_group(group)
    client = connect(zk_connect, zk_timeout_ms)
    try:
        return read_group(client, group, broker_timeout_ms=broker_timeout_ms)
    finally:
        close_client(client)


# --- on a started client -------------------------------------------------------------

def read_group_names(client) -> list:
    try:
        return sorted(client.get_children(layout.CONSUMERS))
    except NoNodeError:
        return []


def _value(client, path: str):
    try:
        return client.get(path)[0]
    except NoNodeError:
        return None


def group_summary(client, group: str) -> dict:
    base = f"{layout.CONSUMERS}/{group}"
    topics = set(children(client, f"{base}/owners")) | set(children(client, f"{base}/offsets"))
    return {"group": group, "members": len(children(client, f"{base}/ids")), "topics": sorted(topics)}


def _subscription_dict(subscription) -> dict:
    if subscription.pattern is None:
        return {"kind": "static", "topics": dict(sorted(subscription.topics.items()))}
    return {"kind": "whitelist" if subscription.whitelist else "blacklist", "pattern": subscription.pattern,
            "streams": subscription.streams}


def read_group(client, group: str, *, broker_timeout_ms: int = BROKER_TIMEOUT_MS) -> dict:
    """The report of ``group`` through ``client``; GroupNotFound if it is not there."""
    base = layout.group_path(group)
    if client.exists(base) is None:
        raise GroupNotFound(f"no consumer group {group!r}")
    notes = []

    members, subscriptions = [], {}
    for consumer_id in children(client, layout.consumer_ids_path(group)):
        value = _value(client, f"{base}/ids/{consumer_id}")
        if value is None:
            continue  # left between the two reads
        try:
            subscription = layout.parse_subscription(value)
            subscriptions[consumer_id] = subscription
            described = _subscription_dict(subscription)
        except layout.LayoutError as exc:
            notes.append(f"member {consumer_id}: {exc}")
            described = {"kind": "invalid", "value": value.decode(errors="replace")}
        members.append({"consumer_id": consumer_id, "subscription": described, "streams": [], "owned": []})

    # Topics: what the members subscribe to (filters over the registered topics), and
    # whatever the group has owners or offsets for.
    topics = set(children(client, f"{base}/owners")) | set(children(client, f"{base}/offsets"))
    registered_topics = None
    for subscription in subscriptions.values():
        if subscription.pattern is None:
            topics.update(subscription.topics)
        else:
            if registered_topics is None:
                registered_topics = read_topics(client)
            topics.update(t for t in registered_topics if subscription.streams_for(t))

    brokers = read_brokers(client)
    rows = {}  # (topic, PartitionId or ReplicatedPartition) -> partition dict
    leaders = {}  # (topic, partition) -> its leader's Broker (None: no leader), for replicated topics
    for topic in sorted(topics):
        try:
            registered, topic_leaders = registered_partitions(client, topic)
        except (layout.LayoutError, InvalidTopicError) as exc:  # a node name that cannot be a topic
            notes.append(f"topic {topic!r}: {exc}")
            continue
        replicated = topic_leaders is not None
        leaders.update({(topic, p): broker for p, broker in (topic_leaders or {}).items()})
        owners = _partition_values(client, f"{base}/owners/{topic}", topic, notes, replicated)
        offsets = _partition_values(client, f"{base}/offsets/{topic}", topic, notes, replicated)
        for partition in sorted(set(registered) | set(owners) | set(offsets)):
            committed = None
            if partition in offsets:
                try:
                    committed = layout.parse_offset(offsets[partition])
                except layout.LayoutError as exc:
                    notes.append(f"{topic} {partition.node()}: {exc}")
            owner = owners.get(partition)
            rows[(topic, partition)] = {
                "broker_id": partition.broker_id, "partition": partition.partition, "node": partition.node(),
                "owner": owner.decode(errors="replace") if owner is not None else None,
                "committed_offset": committed, "log_end_offset": None, "lag": None,
                "lag_messages_estimate": None, "lag_messages_exact": False,
                "registered": partition in registered,
            }

    _fill_log_ends(rows, brokers, broker_timeout_ms, notes, leaders)

    by_stream = {}
    for (topic, partition), row in sorted(rows.items()):
        if row["committed_offset"] is not None and row["log_end_offset"] is not None:
            row["lag"] = row["log_end_offset"] - row["committed_offset"]
        if row["owner"] is not None:
            by_stream.setdefault(row["owner"], []).append(f"{topic}:{row['node']}")
    for member in members:
        prefix = member["consumer_id"] + "-"
        for stream, owned in sorted(by_stream.items()):
            if stream.startswith(prefix) and stream[len(prefix):].isdigit():
                member["streams"].append(stream)
                member["owned"].extend(owned)
    member_ids = {m["consumer_id"] for m in members}
    for stream in sorted(by_stream):
        consumer_id, _, index = stream.rpartition("-")
        if consumer_id not in member_ids or not index.isdigit():
            notes.append(f"owner {stream} is not a stream of a registered member")

    report_topics = []
    for topic in sorted(topics):
        partitions = [row for (t, _), row in sorted(rows.items()) if t == topic]
        if not partitions and topic not in subscribed_topics(subscriptions):
            continue
        lags = [row["lag"] for row in partitions if row["lag"] is not None]
        estimates = [row["lag_messages_estimate"] for row in partitions if row["lag_messages_estimate"] is not None]
        report_topics.append({"topic": topic, "partitions": partitions, "lag": sum(lags),
                              "lag_complete": len(lags) == len(partitions),
                              "lag_messages_estimate": sum(estimates)})
    return {
        "group": group,
        "members": members,
        "topics": report_topics,
        "lag": sum(t["lag"] for t in report_topics),
        "lag_complete": all(t["lag_complete"] for t in report_topics),
        "lag_messages_estimate": sum(t["lag_messages_estimate"] for t in report_topics),
        "notes": notes,
    }


def subscribed_topics(subscriptions: dict) -> set:
    return {topic for s in subscriptions.values() if s.pattern is None for topic in s.topics}


def _partition_values(client, path: str, topic: str, notes: list, replicated: bool = False) -> dict:
    """``{PartitionId: value}`` of the ``<broker>-<partition>`` children of ``path`` (a
    replicated topic: ``{ReplicatedPartition: value}`` of its ``<partition>`` children)."""
    values = {}
    for name in children(client, path):
        try:
            partition = parse_partition_node(name, replicated)
        except layout.LayoutError as exc:
            notes.append(f"{path}: {exc}")
            continue
        value = _value(client, f"{path}/{name}")
        if value is not None:
            values[partition] = value
    return values


def rows_by_broker(rows: dict, brokers: dict, timeout_ms: int, leaders=None):
    """Per broker id, in order: ``(broker_id, broker, consumer, entries)``, ``entries``
    the ``(topic, partition, row)`` of its partitions in order and ``consumer`` a
    SimpleConsumer of that broker, closed after its turn (broker and consumer None for a
    broker that is not registered). One connection per broker. A replicated topic's
    partition goes with its leader (``leaders``: ``{(topic, partition): Broker or None}``;
    one without a leader comes under broker id -1, not registered)."""
    by_broker = {}
    leaders = leaders or {}
    for (topic, partition), row in sorted(rows.items()):
        broker_id = partition.broker_id
        if broker_id == REPLICATED:
            leader = leaders.get((topic, partition.partition))
            if leader is not None:
                broker_id = leader.id
                brokers = {**brokers, leader.id: brokers.get(leader.id, leader)}
        by_broker.setdefault(broker_id, []).append((topic, partition, row))
    for broker_id, entries in sorted(by_broker.items()):
        broker = brokers.get(broker_id)
        if broker is None:
            yield broker_id, None, None, entries
            continue
        consumer = SimpleConsumer(broker.host, broker.port, connect_timeout_ms=timeout_ms,
                                  socket_timeout_ms=timeout_ms)
        try:
            yield broker_id, broker, consumer, entries
        finally:
            consumer.close()


def _fill_log_ends(rows: dict, brokers: dict, timeout_ms: int, notes: list, leaders=None) -> None:
    """Each row's ``log_end_offset`` from its broker (a replicated topic's: from its
    leader), and with a committed offset its lag in messages (a broker that cannot be
    reached is given up after its first failure)."""
    for broker_id, broker, consumer, entries in rows_by_broker(rows, brokers, timeout_ms, leaders):
        if broker is None:
            if broker_id == REPLICATED:
                notes.append("no leader now for " + ", ".join(f"{t} {p.node()}" for t, p, _ in entries)
                             + ": no log end for them")
            else:
                notes.append(f"broker {broker_id} is not registered: no log end for its partitions")
            continue
        for topic, partition, row in entries:
            try:
                row["log_end_offset"] = consumer.latest_offset(topic, partition.partition)
                _fill_lag_messages(consumer, topic, partition, row, notes)
            except (BrokerUnavailableError, OSError) as exc:  # no answer: give the broker up
                notes.append(f"broker {broker_id} ({broker.host}:{broker.port}) could not be reached: {exc}")
                break
            except (BrokerError, MPBrokerError) as exc:
                notes.append(f"{topic} {partition.node()}: broker {broker_id} answered {exc}")


def _fill_lag_messages(consumer, topic: str, partition, row: dict, notes: list) -> None:
    committed, log_end = row["committed_offset"], row["log_end_offset"]
    if committed is None:
        return
    if committed > log_end:
        notes.append(f"{topic} {partition.node()}: the committed offset {committed} is past the log end {log_end}")
        return
    try:
        estimate = lag_messages(consumer, topic, partition.partition, committed, log_end)
    except BrokerUnavailableError:
        raise
    except (ClientError, MPBrokerError) as exc:  # outside the log, not a message start, damaged
        notes.append(f"{topic} {partition.node()}: no message count for the lag: reading at the committed "
                     f"offset {committed} gave {exc}")
        return
    if estimate.messages is None:
        notes.append(f"{topic} {partition.node()}: no message count for the lag: no whole message in the "
                     f"first bytes at {committed}")
    row["lag_messages_estimate"], row["lag_messages_exact"] = estimate.messages, estimate.exact
