"""Changing a consumer group in ZooKeeper: resetting its committed offsets, deleting it.

    plan = plan_reset(client, "loaders", Target.parse_datetime("2024-05-01T00:00Z"),
                      [parse_topic_selection("clicks:1-0,2-0")])
    plan.rows            # [{"topic", "broker_id", "partition", "node", "current_offset",
                         #   "new_offset", "problem", "problem_kind"}, ...]
    execute_reset(client, plan)
    delete_group(client, "loaders")

Both refuse while the group has live members (GroupHasMembers): a member keeps its
offsets in memory and would commit over the new ones, and a deleted group would be
recreated by the next commit. Live means a registration under ``ids`` or an owner
node (ephemeral: a member killed without a shutdown stays live until its ZooKeeper
session times out).

The partitions of a reset: for each topic named (all the topics the group has
offsets for if none is), those its brokers register now plus those the group has an
offset for (a partition of a broker that is gone keeps its offset), narrowed to the
ones named (``topic:1-0,2-3`` for broker 1 partition 0 and broker 2 partition 3;
``topic:0`` for partition 0 on every broker). The new offsets come from each
partition's broker (``mpbroker.clients.groups.offset_targets``). A group that does not exist yet can
be given offsets for the topics named: it then starts there.

Writes are all or nothing: one ZooKeeper transaction creates or sets every offset,
each set only if the node is unchanged since the plan read it, and the deletion of a
group deletes every node of it in one transaction (it fails if a member registered
meanwhile). A member that registers during a reset's transaction is noticed afterwards
(MemberJoinedDuringReset: the offsets were written, but it may have read the old ones).
"""

from typing import NamedTuple

from kazoo.exceptions import NoNodeError

from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.core.leaders import REPLICATED, parse_partition_node, partition_id, registered_partitions
from mpbroker.clients.core.zk_registry import children, read_brokers
from mpbroker.clients.groups.offset_targets import Target, TargetError, resolve
from mpbroker.clients.groups.report import GroupNotFound, rows_by_broker
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout
from mpbroker.registry.layout import PartitionId

BROKER_TIMEOUT_MS = 3000
# The exit code each kind of problem gives (see groups_tool): an offset that cannot be
# used is bad input, a broker that does not answer is unreachable, an error answer a failure.
PROBLEM_KINDS = ("input", "unreachable", "broker")


class GroupHasMembers(Exception):
    """The group has live members; ``members`` are their consumer ids."""

    def __init__(self, group: str, members: list):
        super().__init__(f"group {group!r} has {len(members)} live member{'' if len(members) == 1 else 's'}: "
                         f"{', '.join(members)}")
        self.group, self.members = group, members


class ResetConflict(Exception):
    """The group changed between the plan and the write; nothing was written."""


class MemberJoinedDuringReset(Exception):
    """The offsets were written, but a member registered while they were."""


class TopicSelection(NamedTuple):
    topic: str
    partitions: tuple = ()  # PartitionId (one partition) or int (that partition on every broker); () = all


def parse_topic_selection(text: str) -> TopicSelection:
    """``topic``, ``topic:1-0,2-3`` (broker-partition) or ``topic:0,1`` (on every broker)."""
    topic, colon, rest = text.partition(":")
    try:
        check_topic(topic)
    except InvalidTopicError as exc:
        raise ValueError(str(exc)) from None
    if not colon:
        return TopicSelection(topic)
    partitions = []
    for item in rest.split(","):
        item = item.strip()
        if item.isdigit() and len(item) <= 10:
            partitions.append(int(item))
            continue
        try:
            partitions.append(layout.parse_partition_node(item))
        except layout.LayoutError:
            raise ValueError(f"{text!r}: {item!r} is neither <broker id>-<partition> nor <partition>") from None
    return TopicSelection(topic, tuple(partitions))


class ResetPlan(NamedTuple):
    group: str
    target: Target
    group_exists: bool
    members: list  # live members when the plan was made
    rows: list  # dicts, see the module docstring
    versions: dict  # (topic, PartitionId) -> the offset node's version, or None if it has none

    def problems(self) -> list:
        return [row for row in self.rows if row["problem"] is not None]

    def to_dict(self, executed: bool) -> dict:
        return {"group": self.group, "target": self.target.describe(), "executed": executed,
                "group_exists": self.group_exists, "members": list(self.members), "partitions": list(self.rows)}


# --- reading ----------------------------------------------------------------------------

def live_members(client, group: str) -> list:
    """The consumer ids registered in ``group``, and the consumers owning partitions
    without a registration (still leaving), sorted."""
    members = set(children(client, layout.consumer_ids_path(group)))
    owners_root = layout.group_owners_path(group)
    for topic in children(client, owners_root):
        for node in children(client, f"{owners_root}/{topic}"):
            try:
                value = client.get(f"{owners_root}/{topic}/{node}")[0]
            except NoNodeError:
                continue
            members.add(value.decode(errors="replace").rpartition("-")[0] or "(unnamed owner)")
    return sorted(members)


def _committed(client, group: str, topic: str, replicated: bool = False) -> dict:
    """``{PartitionId: (offset or None, node version)}`` of ``topic``'s offset nodes (a
    replicated topic's: ``{ReplicatedPartition: ...}``)."""
    path = layout.offsets_path(group, topic)
    committed = {}
    for name in children(client, path):
        try:
            partition = parse_partition_node(name, replicated)
            value, stat = client.get(f"{path}/{name}")
        except (layout.LayoutError, NoNodeError):
            continue
        try:
            offset = layout.parse_offset(value)
        except layout.LayoutError:
            offset = None
        committed[partition] = (offset, stat.version)
    return committed


def plan_reset(client, group: str, target: Target, selections=(), *,
               broker_timeout_ms: int = BROKER_TIMEOUT_MS) -> ResetPlan:
    """The offsets a reset would write (see the module docstring). GroupNotFound if the
    group does not exist and no topic is named; ValueError (with the reason) if a named
    topic or partition does not exist, or the group has no offsets and no topic is named."""
    group_path = layout.group_path(group)
    group_exists = client.exists(group_path) is not None
    selections = list(selections)
    if not selections:
        if not group_exists:
            raise GroupNotFound(f"no consumer group {group!r}")
        topics = children(client, layout.group_offsets_path(group))
        if not topics:
            raise ValueError(f"group {group!r} has no committed offsets: name the topics to set with --topic")
        selections = [TopicSelection(topic) for topic in topics]
    wanted = {}  # (topic, PartitionId or ReplicatedPartition) -> (current offset, version)
    leaders = {}  # (topic, partition) -> its leader (replicated topics)
    for selection in selections:
        registered, topic_leaders = registered_partitions(client, selection.topic)
        registered = set(registered)
        leaders.update({(selection.topic, p): broker for p, broker in (topic_leaders or {}).items()})
        committed = _committed(client, group, selection.topic, topic_leaders is not None) if group_exists else {}
        known = registered | set(committed)
        if not known:
            raise ValueError(f"topic {selection.topic!r} is registered by no broker and the group has no offsets "
                             "for it")
        chosen = _narrow(selection, known)
        for partition in chosen:
            wanted[(selection.topic, partition)] = committed.get(partition, (None, None))
    brokers = read_brokers(client)
    rows = {key: {"topic": key[0], "broker_id": key[1].broker_id, "partition": key[1].partition,
                  "node": key[1].node(), "current_offset": current, "new_offset": None, "problem": None,
                  "problem_kind": None}
            for key, (current, _) in wanted.items()}
    _resolve_targets(rows, brokers, target, broker_timeout_ms, leaders)
    return ResetPlan(group, target, group_exists, live_members(client, group) if group_exists else [],
                     [rows[key] for key in sorted(rows)], {key: version for key, (_, version) in wanted.items()})


def _narrow(selection: TopicSelection, known: set) -> list:
    if not selection.partitions:
        return sorted(known)
    chosen = set()
    for item in selection.partitions:
        matching = {p for p in known if p == item} if isinstance(item, PartitionId) else \
            {p for p in known if p.partition == item}
        if not matching:
            shown = item.node() if isinstance(item, PartitionId) else f"partition {item}"
            raise ValueError(f"topic {selection.topic!r} has no {shown} (known: "
                             f"{', '.join(p.node() for p in sorted(known))})")
        chosen |= matching
    return sorted(chosen)


def _resolve_targets(rows: dict, brokers: dict, target: Target, timeout_ms: int, leaders=None) -> None:
    for broker_id, broker, consumer, entries in rows_by_broker(rows, brokers, timeout_ms, leaders):
        if broker is None:
            why = "no leader now" if broker_id == REPLICATED else f"broker {broker_id} is not registered"
            for _, _, row in entries:
                row["problem"], row["problem_kind"] = why, "unreachable"
            continue
        for index, (topic, partition, row) in enumerate(entries):
            try:
                row["new_offset"] = resolve(consumer, topic, partition.partition, target)
            except TargetError as exc:
                row["problem"], row["problem_kind"] = str(exc), exc.kind
            except (BrokerUnavailableError, OSError) as exc:  # give the broker up
                for _, _, left in entries[index:]:
                    left["problem"] = f"broker {broker_id} ({broker.host}:{broker.port}) could not be reached: {exc}"
                    left["problem_kind"] = "unreachable"
                break


# --- writing ----------------------------------------------------------------------------

def execute_reset(client, plan: ResetPlan) -> int:
    """Write ``plan``'s offsets in one transaction; the number written. GroupHasMembers
    if the group has live members now, ValueError if the plan has problems,
    ResetConflict if the group's offsets changed since the plan (nothing written),
    MemberJoinedDuringReset if a member registered while writing (all written)."""
    if plan.problems():
        raise ValueError(f"{len(plan.problems())} partition(s) have no new offset")
    members = live_members(client, plan.group)
    if members:
        raise GroupHasMembers(plan.group, members)
    ids_path = layout.consumer_ids_path(plan.group)
    ids_before = client.exists(ids_path)
    transaction = client.transaction()
    parents = [layout.CONSUMERS, layout.group_path(plan.group), layout.group_offsets_path(plan.group)]
    parents += sorted({layout.offsets_path(plan.group, row["topic"]) for row in plan.rows})
    for path in parents:
        if client.exists(path) is None:
            transaction.create(path, b"")
    for row in plan.rows:
        partition = partition_id(row["broker_id"], row["partition"])
        path = layout.offset_path(plan.group, row["topic"], partition)
        value = str(row["new_offset"]).encode()
        version = plan.versions.get((row["topic"], partition))
        if version is None:
            transaction.create(path, value)
        else:
            transaction.set_data(path, value, version)
    results = transaction.commit()
    failed = [result for result in results if isinstance(result, Exception)]
    if failed:
        raise ResetConflict(f"the group's offsets changed since they were read ({type(failed[0]).__name__}"
                            f"{''.join(f': {a}' for a in failed[0].args[:1])}); nothing was written")
    ids_after = client.exists(ids_path)
    joined = (ids_before is None) != (ids_after is None) or (
        ids_after is not None and ids_after.cversion != ids_before.cversion)
    if joined or live_members(client, plan.group):
        raise MemberJoinedDuringReset(
            f"a member registered in {plan.group!r} while the offsets were written: it may have started from the "
            f"old offsets and will commit over the new ones; stop it and reset again")
    return len(plan.rows)


def delete_group(client, group: str) -> dict:
    """Delete ``/consumers/<group>`` and everything under it, in one transaction.
    GroupNotFound, GroupHasMembers, or ResetConflict if a node was added meanwhile
    (nothing deleted). Returns ``{"group", "topics", "offsets"}``: what it held."""
    root = layout.group_path(group)
    if client.exists(root) is None:
        raise GroupNotFound(f"no consumer group {group!r}")
    members = live_members(client, group)
    if members:
        raise GroupHasMembers(group, members)
    paths = []

    def walk(path):
        for child in children(client, path):
            walk(f"{path}/{child}")
        paths.append(path)  # children first
    walk(root)
    offsets_root = layout.group_offsets_path(group)
    topics = children(client, offsets_root)
    offsets = sum(1 for path in paths if path.startswith(offsets_root + "/") and path.count("/") ==
                  offsets_root.count("/") + 2)
    transaction = client.transaction()
    for path in paths:
        transaction.delete(path)
    results = transaction.commit()
    failed = [result for result in results if isinstance(result, Exception)]
    if failed:
        raise ResetConflict(f"group {group!r} changed while it was being deleted ({type(failed[0]).__name__}); "
                            "nothing was deleted")
    return {"group": group, "topics": topics, "offsets": offsets}
