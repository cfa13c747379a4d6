"""What the modern consumer groups of a cluster are doing: their names, and one group's
state, members (with the partitions each was assigned) and, per partition, the committed
offset, the log end and the lag.

    with connect("localhost:9093") as admin:
        list_groups(admin)                 # ["billing", "loaders"]
        summarize_groups(admin)            # [{"group", "state", "members"}, ...]
        describe_group(admin, "loaders")   # see ``describe_group``

The names come from ListGroups on every broker Metadata names (each lists the groups
it coordinates); a group's description from DescribeGroups at its coordinator, its
commits from OffsetFetch there, the log ends from ListOffsets (latest: what consumers
can read) at each partition's leader. A member's partitions are decoded from its
assignment, the "consumer" protocol's format (version, then per topic its partition
numbers, then user data: kafka-python decodes it); a group of another protocol type
shows its members without partitions. Offsets are byte positions here, with gaps (a
batch of n records at bytes [p, q) holds offsets q-n .. q-1), so a lag counts offsets,
roughly bytes, not records: 0 means the group has read everything.
"""

import re
import time

import kafka.errors as kafka_errors
from kafka import TopicPartition
from kafka.protocol.consumer import OffsetSpec

from mpbroker.clients.modern_groups.connection import RETRY_S, TIMEOUT_MS, BrokerAnswered, retrying

DEAD = "Dead"
INACTIVE_STATES = ("Empty", DEAD)
_LOAD_ERRORS = ("COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE")
_ERROR_CODE = re.compile(r"\[Error (-?\d+)\]")


class GroupNotFound(Exception):
    """The cluster knows no group of that id (no members, no commits)."""


def list_groups(admin) -> list:
    """The ids of every modern group, sorted."""
    return sorted({listed["group_id"] for listed in retrying(admin, admin.list_groups)})


def summarize_groups(admin) -> list:
    """``[{"group", "state", "members"}]`` for every group, sorted by id."""
    names = list_groups(admin)
    described = _describe(admin, names) if names else {}
    return [{"group": name, "state": described[name]["group_state"], "members": len(described[name]["members"])}
            for name in names]


def _describe(admin, group_ids) -> dict:
    """DescribeGroups, asked again while a coordinator is loading or moving (its answer
    carries the error: kafka-python does not raise it)."""
    found = {}
    wanted = list(group_ids)
    deadline = time.monotonic() + getattr(admin, "timeout_ms", TIMEOUT_MS) / 1000
    while True:
        answers = retrying(admin, admin.describe_groups, wanted)
        wanted = []
        for group_id, answer in answers.items():
            error = _kafka_name(answer.get("error"))
            if error in _LOAD_ERRORS and time.monotonic() < deadline:
                wanted.append(group_id)
            elif error:
                raise BrokerAnswered(f"describing group {group_id!r}: the coordinator answered {error}", error)
            else:
                found[group_id] = answer
        if not wanted:
            return found
        time.sleep(RETRY_S)


def _kafka_name(error_text) -> str:
    """``COORDINATOR_LOAD_IN_PROGRESS`` of kafka-python's "[Error 14] Coordinator..."
    (the text it puts in a described group's answer), "" for none."""
    if not error_text:
        return ""
    found = _ERROR_CODE.search(error_text)
    return kafka_errors.for_code(int(found.group(1))).message if found else str(error_text)


def describe_group_state(admin, group_id: str) -> tuple:
    """``(state, [member id, ...])`` of DescribeGroups (Dead: no such group)."""
    described = _describe(admin, [group_id])[group_id]
    return described["group_state"], [member["member_id"] for member in described["members"]]


def member_partitions(member: dict) -> dict | None:
    """``{topic: [partition, ...]}`` of a described member's assignment, None when it
    is not the consumer protocol's (or not decodable)."""
    assignment = member.get("member_assignment")
    if not assignment:
        return {}
    if not isinstance(assignment, dict):
        return None
    return {entry["topic"]: sorted(entry["partitions"]) for entry in assignment.get("assigned_partitions", [])}


def committed_offsets(admin, group_id: str) -> dict:
    """``{(topic, partition): offset}`` the group committed."""
    offsets = retrying(admin, admin.list_group_offsets, group_id).get(group_id, {})
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


def log_offsets(admin, partitions, spec=OffsetSpec.LATEST) -> tuple:
    """``({(topic, partition): offset}, {(topic, partition): error name})`` of
    ListOffsets ``spec`` (LATEST, EARLIEST, or an OffsetTimestamp) for ``partitions``.
    One request per leader; after an error, each partition alone, so one bad
    partition does not hide the others."""
    partitions = sorted(set(partitions))
    if not partitions:
        return {}, {}
    try:
        answers = retrying(admin, admin.list_partition_offsets,
                           {TopicPartition(topic, partition): spec for topic, partition in partitions})
        return {(tp.topic, tp.partition): answer.offset for tp, answer in answers.items()}, {}
    except BrokerAnswered:
        pass
    found, errors = {}, {}
    for topic, partition in partitions:
        try:
            answers = retrying(admin, admin.list_partition_offsets, {TopicPartition(topic, partition): spec})
        except BrokerAnswered as exc:
            errors[(topic, partition)] = exc.name or str(exc)
            continue
        found[(topic, partition)] = next(iter(answers.values())).offset
    return found, errors


def describe_group(admin, group_id: str) -> dict:
    """``{"group", "state", "protocol_type", "protocol", "members": [{"member_id",
    "group_instance_id", "client_id", "host", "partitions": {topic: [p]} or None}],
    "partitions": [{"topic", "partition", "committed_offset", "log_end_offset", "lag",
    "member_id", "client_id", "host"}], "lag", "notes"}``; ``None`` where a value is not
    known (no commit yet; a log end not answered, with a note). GroupNotFound for an
    unknown group."""
    described = _describe(admin, [group_id])[group_id]
    committed = committed_offsets(admin, group_id)
    if described["group_state"] == DEAD and not described["members"] and not committed:
        raise GroupNotFound(group_id)
    members, owners = [], {}
    for member in described["members"]:
        assigned = member_partitions(member)
        members.append({"member_id": member["member_id"], "group_instance_id": member.get("group_instance_id"),
                        "client_id": member["client_id"], "host": member["client_host"], "partitions": assigned})
        for topic, numbers in (assigned or {}).items():
            for partition in numbers:
                owners[(topic, partition)] = members[-1]
    keys = sorted(set(committed) | set(owners))
    ends, errors = log_offsets(admin, keys)
    rows, notes = [], []
    for topic, partition in keys:
        key = (topic, partition)
        offset, end, owner = committed.get(key), ends.get(key), owners.get(key)
        lag = max(0, end - offset) if offset is not None and end is not None and end >= 0 else None
        rows.append({"topic": topic, "partition": partition, "committed_offset": offset,
                     "log_end_offset": end if end is not None and end >= 0 else None, "lag": lag,
                     "member_id": owner["member_id"] if owner else None,
                     "client_id": owner["client_id"] if owner else None, "host": owner["host"] if owner else None})
        if key in errors:
            notes.append(f"{topic} {partition}: no log end ({errors[key]})")
    if any(member["partitions"] is None for member in members):
        notes.append(f"protocol type {described['protocol_type']!r}: the members' assignments are not the consumer "
                     "protocol's; their partitions are not shown")
    return {"group": group_id, "state": described["group_state"], "protocol_type": described["protocol_type"],
            "protocol": described["protocol_data"], "members": members, "partitions": rows,
            "lag": sum(row["lag"] for row in rows if row["lag"] is not None), "notes": notes}
