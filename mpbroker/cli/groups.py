"""``mpbroker-groups``: the consumer groups in ZooKeeper, what one of them is doing, and
changing one (its offsets reset, or the group deleted), as ``kafka-consumer-groups`` does.

    mpbroker-groups --zookeeper ZK [--list] [--json]
    mpbroker-groups --zookeeper ZK [--describe] --group G [--json] [--broker-timeout-ms N]
    mpbroker-groups --zookeeper ZK --group G --reset-offsets
        (--to-earliest | --to-latest | --to-datetime ISO | --to-offset N)
        [--topic T[:B-P,...|:P,...]]... [--execute] [--json]
    mpbroker-groups --zookeeper ZK --group G --delete [--json]

``--zookeeper HOST:PORT[,..][/chroot]`` is the ``zk.connect`` of the cluster. Without
``--group``: one line per group (members, topics with owners or offsets); ``--list``:
the group names alone. ``--group`` (or ``--describe --group``): its members and their
subscriptions, then per topic and partition the owning stream, the committed offset,
the log end (OFFSETS latest from the broker holding the partition), the lag (log end -
committed, in bytes: offsets are byte positions) and the lag in messages (counted from
one fetch at the committed offset when it reached the log end, else ``~N``: estimated
from that fetch's bytes per message, see ``mpbroker.clients.groups.lag_estimate``); ``-`` where a value
is unknown, with the reason below the table. ``--json`` prints ``mpbroker.clients.groups.report``'s
dict instead. These read only.

``--reset-offsets`` prints the plan (topic, broker-partition, current offset, new
offset) and writes nothing unless ``--execute`` is given; the new offsets come from the
brokers (``mpbroker.clients.groups.offset_targets``: ``--to-datetime`` has a segment's granularity;
``--to-offset`` must start a whole message inside the log). The partitions: every one
of the topics the group has offsets for, or of the ``--topic``s named (a topic's
registered partitions plus those the group has offsets for; ``T:1-0,2-3`` narrows to
broker 1 partition 0 and broker 2 partition 3, ``T:0`` to partition 0 on every
broker). Offsets can be given to a group that does not exist yet (name the topics).
``--delete`` removes ``/consumers/<group>`` with its offsets. Both refuse while the
group has live members (a member would commit over the new offsets, or recreate the
deleted group); a dry run shows the plan and says so. See ``mpbroker.clients.groups.admin``.

Exit codes: 0 done (a dry run printed); 1 no such group, the group has live members,
it changed while being written (nothing written), or a broker answered with an error;
2 bad arguments or input (an offset that is outside the log or does not start a
message, a topic or partition that does not exist); 3 no ZooKeeper server answered
within ``--zk-timeout-ms`` (or the connection was lost), or a broker holding a
partition of the plan is not registered or does not answer.
"""

import argparse
import json
import logging
import sys

from mpbroker.cli.failure import fail
from mpbroker.clients.groups import admin as group_admin
from mpbroker.clients.groups.offset_targets import EARLIEST, LATEST, Target
from mpbroker.clients.groups.report import (
    BROKER_TIMEOUT_MS,
    ZK_TIMEOUT_MS,
    GroupNotFound,
    connect,
    describe_group,
    read_group_names,
    summarize_groups,
)
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable, close_client

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_FAILED = 1  # live members, a change while writing, a broker's error answer
PROG = "mpbroker-groups"
_PROBLEM_EXIT = {"input": EXIT_USAGE, "unreachable": EXIT_UNREACHABLE, "broker": EXIT_FAILED}


class _Refused(Exception):
    """Stop with ``code`` after printing ``lines`` to stderr."""

    def __init__(self, code: int, *lines: str):
        super().__init__(*lines)
        self.code, self.lines = code, lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="list the consumer groups, describe one, reset its "
                                                            "offsets or delete it")
    parser.add_argument("--zookeeper", metavar="ZK", required=True,
                        help="HOST:PORT[,HOST:PORT...][/chroot] (zk.connect)")
    parser.add_argument("--group", help="the group to describe (the default with --group), reset or delete")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--list", action="store_true", help="print the names of the groups, one per line")
    actions.add_argument("--describe", action="store_true",
                         help="with --group: members, owners, offsets and lag (bytes and messages)")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="with --group and one --to-*: print the new offsets (dry run), write them with "
                              "--execute; refused while the group has live members")
    actions.add_argument("--delete", action="store_true",
                         help="with --group: delete the group and its offsets; refused while it has live members")
    targets = parser.add_mutually_exclusive_group()
    targets.add_argument("--to-earliest", action="store_true", help="reset to each partition's earliest offset")
    targets.add_argument("--to-latest", action="store_true", help="reset to each partition's log end")
    targets.add_argument("--to-datetime", metavar="ISO",
                         help="reset to the start of the newest segment last written at or before this time "
                              "(ISO 8601, e.g. 2024-05-01T12:00:00+00:00; no zone: local time)")
    targets.add_argument("--to-offset", metavar="N", type=int,
                         help="reset to this byte offset (must lie in the log and start a message)")
    parser.add_argument("--topic", action="append", default=[], metavar="T[:B-P,...]",
                        help="with --reset-offsets: only this topic (repeatable); T:1-0,2-3 names broker-partitions, "
                             "T:0 partition 0 on every broker (default: every topic the group has offsets for)")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: write the offsets")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--zk-timeout-ms", type=int, default=ZK_TIMEOUT_MS,
                        help=f"give up when no ZooKeeper server answered within this (default {ZK_TIMEOUT_MS})")
    parser.add_argument("--broker-timeout-ms", type=int, default=BROKER_TIMEOUT_MS,
                        help=f"connect/answer timeout of each broker asked for offsets (default {BROKER_TIMEOUT_MS})")
    return parser


def _check_args(args) -> None:
    """ValueError for a combination the parser cannot refuse by itself."""
    target_given = args.to_earliest or args.to_latest or args.to_datetime is not None or args.to_offset is not None
    if args.group is not None:
        layout.check_group(args.group)
    layout.split_zk_connect(args.zookeeper)
    if args.zk_timeout_ms < 1 or args.broker_timeout_ms < 1:
        raise ValueError("timeouts must be >= 1 ms")
    if args.list and args.group is not None:
        raise ValueError("--list lists every group: leave out --group (or use --describe)")
    if (args.describe or args.reset_offsets or args.delete) and args.group is None:
        action = "--describe" if args.describe else "--reset-offsets" if args.reset_offsets else "--delete"
        raise ValueError(f"{action} needs --group G")
    if args.reset_offsets and not target_given:
        raise ValueError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --to-offset")
    if not args.reset_offsets and (target_given or args.topic or args.execute):
        raise ValueError("--to-*, --topic and --execute go with --reset-offsets")
    if args.to_offset is not None and args.to_offset < 0:
        raise ValueError(f"--to-offset {args.to_offset}: offsets are >= 0")
    args.selections = [group_admin.parse_topic_selection(text) for text in args.topic]
    if args.to_datetime is not None:
        args.target = Target.parse_datetime(args.to_datetime)
    elif args.to_offset is not None:
        args.target = Target.at(args.to_offset)
    else:
        args.target = EARLIEST if args.to_earliest else LATEST


def _table(headers, rows) -> str:  # as mpbroker-ctl's
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _shown(value) -> str:
    return "-" if value is None else str(value)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def format_subscription(subscription: dict) -> str:
    kind = subscription["kind"]
    if kind == "static":
        return ",".join(f"{topic}:{streams}" for topic, streams in subscription["topics"].items())
    if kind in ("whitelist", "blacklist"):
        return f"{kind} {subscription['pattern']} ({subscription['streams']} streams)"
    return f"invalid {subscription.get('value', '')!r}"


def format_groups(summaries: list) -> str:
    if not summaries:
        return "no consumer groups"
    return _table(["group", "members", "topics"],
                  [[s["group"], s["members"], ",".join(s["topics"]) or "-"] for s in summaries])


def format_lag_messages(row: dict) -> str:
    """A partition's lag in messages: ``N`` counted, ``~N`` estimated, ``-`` unknown."""
    estimate = row.get("lag_messages_estimate")
    if estimate is None:
        return "-"
    return str(estimate) if row.get("lag_messages_exact") else f"~{estimate}"


def format_report(report: dict) -> str:
    members = report["members"]
    partitions = [p for topic in report["topics"] for p in topic["partitions"]]
    unknown = sum(1 for p in partitions if p["lag"] is None)
    lag = f"lag {report['lag']} bytes" + (f" (not known for {_plural(unknown, 'partition')})" if unknown else "")
    estimated = [p for p in partitions if p.get("lag_messages_estimate") is not None]
    if estimated:
        exact = all(p["lag_messages_exact"] for p in estimated) and len(estimated) == len(partitions)
        lag += f", {'' if exact else '~'}{_plural(sum(p['lag_messages_estimate'] for p in estimated), 'message')}"
    head = f"group {report['group']}: {_plural(len(members), 'member')}, {_plural(len(report['topics']), 'topic')}, "
    out = [head + lag, ""]
    if members:
        out.append(_table(["member", "subscription", "streams", "partitions"],
                          [[m["consumer_id"], format_subscription(m["subscription"]), len(m["streams"]),
                            len(m["owned"])] for m in members]))
    else:
        out.append("no members")
    out.append("")
    rows = [[topic["topic"], p["node"], _shown(p["owner"]), _shown(p["committed_offset"]),
             _shown(p["log_end_offset"]), _shown(p["lag"]), format_lag_messages(p)]
            for topic in report["topics"] for p in topic["partitions"]]
    if rows:
        out.append(_table(["topic", "partition", "owner", "committed", "log_end", "lag", "lag_msgs"], rows))
        if any(p.get("lag_messages_estimate") is not None and not p["lag_messages_exact"] for p in partitions):
            out.append("(~N: estimated from the first bytes after the committed offset)")
    else:
        out.append("no partitions")
    for note in report["notes"]:
        out.append(f"note: {note}")
    return "\n".join(out)


def format_plan(plan: dict, written: int | None = None, execute: bool = False) -> str:
    """The reset plan (``ResetPlan.to_dict``); ``written``: how many offsets were written;
    ``execute``: whether they were to be (a plan with problems is not written)."""
    rows = [[p["topic"], p["node"], _shown(p["current_offset"]), _shown(p["new_offset"])] for p in plan["partitions"]]
    head = f"reset of group {plan['group']} to {plan['target']}: "
    if written is not None:
        head += f"wrote {_plural(written, 'offset')}"
    elif execute:
        missing = sum(1 for p in plan["partitions"] if p["new_offset"] is None)
        head += f"nothing written: {_plural(missing, 'partition')} without a new offset"
    else:
        head += "dry run, nothing written (--execute writes)"
    out = [head, "", _table(["topic", "partition", "current", "new"], rows)]
    for p in plan["partitions"]:
        if p["problem"] is not None:
            out.append(f"problem: {p['topic']} {p['node']}: {p['problem']}")
    if not plan["group_exists"]:
        out.append(f"note: group {plan['group']} does not exist yet: --execute creates it with these offsets")
    if plan["members"] and written is None:
        out.append(f"note: the group has {_plural(len(plan['members']), 'live member')} "
                   f"({', '.join(plan['members'])}): --execute refuses until they have stopped")
    return "\n".join(out)


def _members_refusal(exc: group_admin.GroupHasMembers, what: str) -> _Refused:
    return _Refused(EXIT_FAILED, f"{exc}",
                    f"stop them first: {what} (a member killed without a shutdown leaves when its ZooKeeper session "
                    "times out)")


def _reset(args) -> tuple:
    """(text, exit code) of --reset-offsets."""
    client = connect(args.zookeeper, args.zk_timeout_ms)
    try:
        try:
            plan = group_admin.plan_reset(client, args.group, args.target, args.selections,
                                          broker_timeout_ms=args.broker_timeout_ms)
        except ValueError as exc:
            raise _Refused(EXIT_USAGE, str(exc)) from None
        problems = plan.problems()
        written = None
        if args.execute and not problems:
            try:
                written = group_admin.execute_reset(client, plan)
            except group_admin.GroupHasMembers as exc:
                raise _members_refusal(exc, "a live member would commit its own offsets over the new ones") from None
            except group_admin.ResetConflict as exc:
                raise _Refused(EXIT_FAILED, f"group {args.group}: {exc}; run again") from None
            except group_admin.MemberJoinedDuringReset as exc:
                raise _Refused(EXIT_FAILED, f"wrote {_plural(len(plan.rows), 'offset')}, but {exc}") from None
    finally:
        close_client(client)
    result = plan.to_dict(written is not None)
    text = json.dumps(result, indent=2) if args.json else format_plan(result, written, args.execute)
    code = EXIT_OK
    if problems:  # the most actionable first: bad input, then an unreachable broker, then an error answer
        code = min((_PROBLEM_EXIT[p["problem_kind"]] for p in problems),
                   key=lambda c: (EXIT_USAGE, EXIT_UNREACHABLE, EXIT_FAILED).index(c))
    return text, code


def _delete(args) -> str:
    client = connect(args.zookeeper, args.zk_timeout_ms)
    try:
        try:
            result = group_admin.delete_group(client, args.group)
        except group_admin.GroupHasMembers as exc:
            raise _members_refusal(exc, "a live member would recreate the group at its next commit") from None
        except group_admin.ResetConflict as exc:
            raise _Refused(EXIT_FAILED, f"{exc}; run again") from None
    finally:
        close_client(client)
    if args.json:
        return json.dumps({**result, "deleted": True}, indent=2)
    return (f"deleted consumer group {args.group} (committed offsets of {_plural(result['offsets'], 'partition')} "
            f"in {_plural(len(result['topics']), 'topic')})")


def _list(args) -> str:
    client = connect(args.zookeeper, args.zk_timeout_ms)
    try:
        names = read_group_names(client)
    finally:
        close_client(client)
    return json.dumps({"groups": names}, indent=2) if args.json else "\n".join(names)


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        _check_args(args)
    except ValueError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the connection errors are reported below
    code = EXIT_OK
    try:
        if args.reset_offsets:
            text, code = _reset(args)
        elif args.delete:
            text = _delete(args)
        elif args.list:
            text = _list(args)
        elif args.group is None:
            result = summarize_groups(args.zookeeper, zk_timeout_ms=args.zk_timeout_ms)
            text = json.dumps({"groups": result}, indent=2) if args.json else format_groups(result)
        else:
            result = describe_group(args.zookeeper, args.group, zk_timeout_ms=args.zk_timeout_ms,
                                    broker_timeout_ms=args.broker_timeout_ms)
            text = json.dumps(result, indent=2) if args.json else format_report(result)
    except _Refused as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr)
        return exc.code
    except GroupNotFound:
        return fail(PROG, f"no consumer group {args.group!r} in ZooKeeper at {args.zookeeper}", EXIT_NOT_FOUND)
    except ZooKeeperUnavailable as exc:
        return fail(PROG, f"ZooKeeper unreachable: {exc}", EXIT_UNREACHABLE)
    except ZK_ERRORS as exc:
        return fail(PROG, f"lost ZooKeeper at {args.zookeeper}: {exc!r}", EXIT_UNREACHABLE)
    try:
        if text:
            print(text, flush=True)
    except BrokenPipeError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
