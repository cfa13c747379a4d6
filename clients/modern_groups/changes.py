"""Changing a modern consumer group: resetting its committed offsets, deleting it.

    plan = plan_reset(admin, "loaders", Target("earliest"), [("clicks", ())])
    plan.rows        # [{"topic", "partition", "current_offset", "new_offset", "log_start",
                     #   "log_end", "problem", "problem_kind"}, ...]
    execute_reset(admin, plan)       # OffsetCommit at the coordinator
    delete_group(admin, "loaders")   # DeleteGroups

Both need a group without active members, as Kafka's tool does: a member keeps its
position in memory and would commit over the new offsets, and the coordinator refuses
to delete a group that is not empty (NON_EMPTY_GROUP). ``plan_reset`` refuses a group
whose state is not Empty or Dead (GroupActive), so even the dry run says so at once.
The commit is the one a consumer using ``assign()`` makes: generation -1 and no member
id, which the coordinator takes only while the group has no members; a member that
joined between the plan and the commit makes it answer UNKNOWN_MEMBER_ID (GroupActive
again, nothing written). A group that does not exist yet can be given offsets for the
topics named: it then starts there.

The partitions of a reset: every partition of each topic named (``T``), or those
named (``T:0,2``); with no topic named, every partition of each topic the group has
committed offsets for (a shift: the partitions it has committed offsets for).
"""

from typing import NamedTuple

import kafka.errors as kafka_errors
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from mpbroker.clients.modern_groups.connection import BrokerAnswered, error_name, retrying
from mpbroker.clients.modern_groups.report import (
    INACTIVE_STATES,
    GroupNotFound,
    committed_offsets,
    describe_group_state,
)
from mpbroker.clients.modern_groups.targets import Target, resolve
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic

_MEMBER_ERRORS = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")


class GroupActive(Exception):
    """The group has members (``state``, ``members``: their ids)."""

    def __init__(self, group: str, state: str, members: list):
        count = f"{len(members)} active member{'' if len(members) == 1 else 's'}"
        super().__init__(f"group {group!r} is {state} with {count}" + (f" ({', '.join(members)})" if members else ""))
        self.group, self.state, self.members = group, state, members


class TopicSelection(NamedTuple):
    topic: str
    partitions: tuple = ()  # () = every partition


def parse_topic_selection(text: str) -> TopicSelection:
    """``topic`` or ``topic:0,2`` (ValueError otherwise)."""
    topic, colon, rest = text.partition(":")
    try:
        check_topic(topic)
    except InvalidTopicError as exc:
        raise ValueError(str(exc)) from None
    if not colon:
        return TopicSelection(topic)
    try:
        partitions = tuple(sorted({int(item) for item in rest.split(",")}))
    except ValueError:
        raise ValueError(f"--topic {text!r}: partitions are numbers, as in {topic}:0,2") from None
    if any(partition < 0 for partition in partitions):
        raise ValueError(f"--topic {text!r}: partitions are >= 0")
    return TopicSelection(topic, partitions)


class ResetPlan(NamedTuple):
    group: str
    target: Target
    state: str
    rows: list

    def problems(self) -> list:
        return [row for row in self.rows if row["problem"] is not None]

    def to_dict(self, executed: bool = False) -> dict:
        return {"group": self.group, "target": self.target.describe(), "state": self.state,
                "executed": executed, "partitions": self.rows}


def topic_partitions(admin, topics) -> dict:
    """``{topic: partition count}`` from Metadata; ValueError for an unknown topic."""
    counts = {}
    for described in retrying(admin, admin.describe_topics, sorted(set(topics))):
        if described["error_code"]:
            error = error_name(kafka_errors.for_code(described["error_code"]))
            raise ValueError(f"topic {described['name']!r}: {error}")
        counts[described["name"]] = len(described["partitions"])
    return counts


def plan_reset(admin, group: str, target: Target, selections) -> ResetPlan:
    """The plan (GroupActive while the group has members; ValueError for a topic or
    partition that does not exist, or no topic to reset)."""
    state, members = describe_group_state(admin, group)
    if state not in INACTIVE_STATES:
        raise GroupActive(group, state, members)
    current = committed_offsets(admin, group)
    named = bool(selections)
    selections = list(selections) or [TopicSelection(topic) for topic in sorted({t for t, _ in current})]
    if not selections:
        raise ValueError(f"group {group!r} has no committed offsets: name the topics to reset with --topic T")
    counts = topic_partitions(admin, [selection.topic for selection in selections])
    partitions = set()
    for selection in selections:
        count = counts[selection.topic]
        wanted = selection.partitions or range(count)
        missing = [partition for partition in wanted if partition >= count]
        if missing:
            raise ValueError(f"topic {selection.topic!r} has {count} partitions (0-{count - 1}): no partition "
                             f"{', '.join(map(str, missing))}")
        partitions.update((selection.topic, partition) for partition in wanted)
    if target.kind == "shift" and not named:  # only what there is to shift
        partitions &= set(current)
    resolved = resolve(admin, target, partitions, current)
    rows = [{"topic": topic, "partition": partition, "current_offset": current.get((topic, partition)),
             **resolved[(topic, partition)]._asdict()} for topic, partition in sorted(partitions)]
    return ResetPlan(group, target, state, rows)


def execute_reset(admin, plan: ResetPlan) -> int:
    """Commits the plan's offsets (all or, on a refusal, none); returns how many."""
    offsets = {TopicPartition(row["topic"], row["partition"]): OffsetAndMetadata(row["new_offset"], "", None)
               for row in plan.rows}
    answers = retrying(admin, admin.alter_group_offsets, plan.group, offsets)
    errors = {error_name(error) for error in answers.values() if error is not kafka_errors.NoError}
    if errors & set(_MEMBER_ERRORS):
        state, members = describe_group_state(admin, plan.group)
        raise GroupActive(plan.group, state, members)
    if errors:
        raise BrokerAnswered(f"the coordinator refused the commit: {', '.join(sorted(errors))}", sorted(errors)[0])
    return len(offsets)


def delete_group(admin, group: str) -> None:
    """DeleteGroups: GroupNotFound, GroupActive (NON_EMPTY_GROUP), BrokerAnswered."""
    answer = retrying(admin, admin.delete_groups, [group]).get(group)
    if answer == "OK":
        return
    if answer in ("GroupIdNotFoundError", "GroupIdNotFound"):
        raise GroupNotFound(group)
    if answer == "NonEmptyGroupError":
        state, members = describe_group_state(admin, group)
        raise GroupActive(group, state, members)
    raise BrokerAnswered(f"the coordinator answered {answer}", str(answer))
