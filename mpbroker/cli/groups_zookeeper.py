"""``mpbroker-groups --zookeeper``: the ZooKeeper consumer groups of 0.7 clients (see
``mpbroker.cli.groups`` for the options and exit codes): the summary, the list, a
group's report, a reset of its offsets and its deletion, each an action that returns
what to print (``Refused`` for a refusal with its exit code), and their formats."""

import json

from mpbroker.cli.groups_tables import Refused, plural, shown, table
from mpbroker.clients.groups import admin as group_admin
from mpbroker.clients.groups.report import connect, describe_group, read_group_names, summarize_groups
from mpbroker.registry.zk_client import close_client

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE = 0, 2, 3
EXIT_FAILED = 1  # live members, a change while writing, a broker's error answer
_PROBLEM_EXIT = {"input": EXIT_USAGE, "unreachable": EXIT_UNREACHABLE, "broker": EXIT_FAILED}


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
    return table(["group", "members", "topics"],
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
    lag = f"lag {report['lag']} bytes" + (f" (not known for {plural(unknown, 'partition')})" if unknown else "")
    estimated = [p for p in partitions if p.get("lag_messages_estimate") is not None]
    if estimated:
        exact = all(p["lag_messages_exact"] for p in estimated) and len(estimated) == len(partitions)
        lag += f", {'' if exact else '~'}{plural(sum(p['lag_messages_estimate'] for p in estimated), 'message')}"
    head = f"group {report['group']}: {plural(len(members), 'member')}, {plural(len(report['topics']), 'topic')}, "
    out = [head + lag, ""]
    if members:
        out.append(table(["member", "subscription", "streams", "partitions"],
                          [[m["consumer_id"], format_subscription(m["subscription"]), len(m["streams"]),
                            len(m["owned"])] for m in members]))
    else:
        out.append("no members")
    out.append("")
    rows = [[topic["topic"], p["node"], shown(p["owner"]), shown(p["committed_offset"]),
             shown(p["log_end_offset"]), shown(p["lag"]), format_lag_messages(p)]
            for topic in report["topics"] for p in topic["partitions"]]
    if rows:
        out.append(table(["topic", "partition", "owner", "committed", "log_end", "lag", "lag_msgs"], rows))
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
    rows = [[p["topic"], p["node"], shown(p["current_offset"]), shown(p["new_offset"])] for p in plan["partitions"]]
    head = f"reset of group {plan['group']} to {plan['target']}: "
    if written is not None:
        head += f"wrote {plural(written, 'offset')}"
    elif execute:
        missing = sum(1 for p in plan["partitions"] if p["new_offset"] is None)
        head += f"nothing written: {plural(missing, 'partition')} without a new offset"
    else:
        head += "dry run, nothing written (--execute writes)"
    out = [head, "", table(["topic", "partition", "current", "new"], rows)]
    for p in plan["partitions"]:
        if p["problem"] is not None:
            out.append(f"problem: {p['topic']} {p['node']}: {p['problem']}")
    if not plan["group_exists"]:
        out.append(f"note: group {plan['group']} does not exist yet: --execute creates it with these offsets")
    if plan["members"] and written is None:
        out.append(f"note: the group has {plural(len(plan['members']), 'live member')} "
                   f"({', '.join(plan['members'])}): --execute refuses until they have stopped")
    return "\n".join(out)


def _members_refusal(exc: group_admin.GroupHasMembers, what: str) -> Refused:
    return Refused(EXIT_FAILED, f"{exc}",
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
            raise Refused(EXIT_USAGE, str(exc)) from None
        problems = plan.problems()
        written = None
        if args.execute and not problems:
            try:
                written = group_admin.execute_reset(client, plan)
            except group_admin.GroupHasMembers as exc:
                raise _members_refusal(exc, "a live member would commit its own offsets over the new ones") from None
            except group_admin.ResetConflict as exc:
                raise Refused(EXIT_FAILED, f"group {args.group}: {exc}; run again") from None
            except group_admin.MemberJoinedDuringReset as exc:
                raise Refused(EXIT_FAILED, f"wrote {plural(len(plan.rows), 'offset')}, but {exc}") from None
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
            raise Refused(EXIT_FAILED, f"{exc}; run again") from None
    finally:
        close_client(client)
    if args.json:
        return json.dumps({**result, "deleted": True}, indent=2)
    return (f"deleted consumer group {args.group} (committed offsets of {plural(result['offsets'], 'partition')} "
            f"in {plural(len(result['topics']), 'topic')})")


def _list(args) -> str:
    client = connect(args.zookeeper, args.zk_timeout_ms)
    try:
        names = read_group_names(client)
    finally:
        close_client(client)
    return json.dumps({"groups": names}, indent=2) if args.json else "\n".join(names)



def run(args) -> tuple:
    """(text, exit code) of the action ``args`` name."""
    if args.reset_offsets:
        return _reset(args)
    if args.delete:
        return _delete(args), EXIT_OK
    if args.list:
        return _list(args), EXIT_OK
    if args.group is None:
        result = summarize_groups(args.zookeeper, zk_timeout_ms=args.zk_timeout_ms)
        return (json.dumps({"groups": result}, indent=2) if args.json else format_groups(result)), EXIT_OK
    result = describe_group(args.zookeeper, args.group, zk_timeout_ms=args.zk_timeout_ms,
                            broker_timeout_ms=args.broker_timeout_ms)
    return (json.dumps(result, indent=2) if args.json else format_report(result)), EXIT_OK
