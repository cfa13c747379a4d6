"""``mpbroker-groups --bootstrap-server``: the modern consumer groups (see
``mpbroker.cli.groups`` for the options and exit codes), through
``mpbroker.clients.modern_groups``: each action returns what to print and its exit
code, or raises ``Refused``; and their formats, in the spirit of
``kafka-consumer-groups``'."""

import json

from mpbroker.cli.groups_tables import Refused, plural, shown, table
from mpbroker.clients.modern_groups import changes, report
from mpbroker.clients.modern_groups.connection import BrokerAnswered, Unreachable, connect

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
_PROBLEM_EXIT = {"input": EXIT_USAGE, "broker": EXIT_FAILED}


def format_groups(summaries: list) -> str:
    if not summaries:
        return "no consumer groups"
    return table(["group", "state", "members"], [[s["group"], s["state"], s["members"]] for s in summaries])


def format_assignment(partitions) -> str:
    if partitions is None:
        return "?"
    return " ".join(f"{topic}:{','.join(map(str, numbers))}" for topic, numbers in sorted(partitions.items())) or "-"


def format_report(described: dict) -> str:
    members, rows = described["members"], described["partitions"]
    unknown = sum(1 for row in rows if row["lag"] is None and row["committed_offset"] is not None)
    protocol = f" ({described['protocol_type']}: {described['protocol']})" if described["protocol"] else ""
    head = (f"group {described['group']}: {described['state']}{protocol}, {plural(len(members), 'member')}, "
            f"lag {described['lag']}" + (f" (not known for {plural(unknown, 'partition')})" if unknown else ""))
    out = [head, ""]
    if members:
        out.append(table(["member", "client_id", "host", "partitions"],
                         [[m["member_id"], m["client_id"], m["host"], format_assignment(m["partitions"])]
                          for m in members]))
    else:
        out.append(f"group {described['group']} has no active members")
    out.append("")
    if rows:
        out.append(table(["topic", "partition", "committed", "log_end", "lag", "member", "host", "client_id"],
                         [[r["topic"], r["partition"], shown(r["committed_offset"]), shown(r["log_end_offset"]),
                           shown(r["lag"]), shown(r["member_id"]), shown(r["host"]), shown(r["client_id"])]
                          for r in rows]))
    else:
        out.append("no partitions (nothing committed or assigned)")
    out.extend(f"note: {note}" for note in described["notes"])
    return "\n".join(out)


def format_plan(plan: dict, written: int | None = None, execute: bool = False) -> str:
    rows = [[p["topic"], p["partition"], shown(p["current_offset"]), shown(p["new_offset"]),
             f"[{shown(p['log_start'])}, {shown(p['log_end'])}]"] for p in plan["partitions"]]
    head = f"reset of group {plan['group']} ({plan['state']}) to {plan['target']}: "
    if written is not None:
        head += f"wrote {plural(written, 'offset')}"
    elif execute:
        missing = sum(1 for p in plan["partitions"] if p["new_offset"] is None)
        head += f"nothing written: {plural(missing, 'partition')} without a new offset"
    else:
        head += "dry run, nothing written (--execute writes)"
    out = [head, "", table(["topic", "partition", "current", "new", "log"], rows)]
    out.extend(f"problem: {p['topic']} {p['partition']}: {p['problem']}" for p in plan["partitions"] if p["problem"])
    if plan["state"] == report.DEAD and written is None:
        out.append(f"note: group {plan['group']} does not exist yet: --execute creates it with these offsets")
    return "\n".join(out)


def _active(exc: changes.GroupActive, what: str) -> Refused:
    return Refused(EXIT_FAILED, f"{exc}",
                   f"{what} needs an inactive group (Empty), as Kafka's tool does: stop its consumers first (a member "
                   "killed without leaving is removed after its session timeout)")


def _reset(admin, args) -> tuple:
    try:
        plan = changes.plan_reset(admin, args.group, args.target, args.selections)
    except changes.GroupActive as exc:
        raise _active(exc, "a reset") from None
    except ValueError as exc:
        raise Refused(EXIT_USAGE, str(exc)) from None
    problems = plan.problems()
    written = None
    if args.execute and not problems:
        try:
            written = changes.execute_reset(admin, plan)
        except changes.GroupActive as exc:
            raise _active(exc, "a reset (nothing written)") from None
    result = plan.to_dict(written is not None)
    text = json.dumps(result, indent=2) if args.json else format_plan(result, written, args.execute)
    code = EXIT_OK
    if problems:  # bad input first, then an error answer
        code = min((_PROBLEM_EXIT[p["problem_kind"]] for p in problems), key=(EXIT_USAGE, EXIT_FAILED).index)
    return text, code


def _delete(admin, args) -> str:
    try:
        changes.delete_group(admin, args.group)
    except changes.GroupActive as exc:
        raise Refused(EXIT_FAILED, f"{exc}: the coordinator refused to delete it (NON_EMPTY_GROUP)",
                      "stop its consumers first (a member killed without leaving is removed after its session "
                      "timeout)") from None
    if args.json:
        return json.dumps({"group": args.group, "deleted": True}, indent=2)
    return f"deleted consumer group {args.group} (its committed offsets with it)"


def run(args) -> tuple:
    """(text, exit code) of the action ``args`` name."""
    try:
        with connect(args.bootstrap_server, args.broker_timeout_ms) as admin:
            if args.reset_offsets:
                return _reset(admin, args)
            if args.delete:
                return _delete(admin, args), EXIT_OK
            if args.list:
                names = report.list_groups(admin)
                return (json.dumps({"groups": names}, indent=2) if args.json else "\n".join(names)), EXIT_OK
            if args.group is None:
                summaries = report.summarize_groups(admin)
                return (json.dumps({"groups": summaries}, indent=2) if args.json else format_groups(summaries)), \
                    EXIT_OK
            described = report.describe_group(admin, args.group)
            return (json.dumps(described, indent=2) if args.json else format_report(described)), EXIT_OK
    except report.GroupNotFound:
        raise Refused(EXIT_FAILED, f"no consumer group {args.group!r} at {args.bootstrap_server} (GROUP_ID_NOT_FOUND)"
                      ) from None
    except Unreachable as exc:
        raise Refused(EXIT_UNREACHABLE, str(exc)) from None
    except BrokerAnswered as exc:
        raise Refused(EXIT_FAILED, str(exc)) from None
