"""``mpbroker-groups``: the consumer groups in ZooKeeper, and what one of them is doing.

    mpbroker-groups --zookeeper ZK [--json] [--zk-timeout-ms N]
    mpbroker-groups --zookeeper ZK --group G [--json] [--zk-timeout-ms N] [--broker-timeout-ms N]

``--zookeeper HOST:PORT[,..][/chroot]`` is the ``zk.connect`` of the cluster. Without
``--group``: one line per group (members, topics with owners or offsets). With
``--group``: its members and their subscriptions, then per topic and partition the
owning stream, the committed offset, the log end (OFFSETS latest from the broker
holding the partition) and the lag (log end - committed, in bytes: offsets are byte
positions); ``-`` where a value is unknown, with the reason below the table. ``--json``
prints ``clients.group_report``'s dict instead. Nothing is written to ZooKeeper.

Exit codes: 0 done; 1 no such group; 2 bad arguments; 3 no ZooKeeper server answered
within ``--zk-timeout-ms`` (or the connection was lost while reading).
"""

import argparse
import json
import logging
import sys


from clients.group_report import (
    BROKER_TIMEOUT_MS,
    ZK_TIMEOUT_MS,
    GroupNotFound,
    describe_group,
    summarize_groups,
)
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PROG = "mpbroker-groups"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="list the consumer groups, or describe one")
    parser.add_argument("--zookeeper", metavar="ZK", required=True,
                        help="HOST:PORT[,HOST:PORT...][/chroot] (zk.connect)")
    parser.add_argument("--group", help="describe this group (members, owners, offsets, lag)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--zk-timeout-ms", type=int, default=ZK_TIMEOUT_MS,
                        help=f"give up when no ZooKeeper server answered within this (default {ZK_TIMEOUT_MS})")
    parser.add_argument("--broker-timeout-ms", type=int, default=BROKER_TIMEOUT_MS,
                        help=f"connect/answer timeout of each broker asked for log ends (default {BROKER_TIMEOUT_MS})")
    return parser


def _table(headers, rows) -> str:  # as mpbroker-ctl's
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _shown(value) -> str:
    return "-" if value is None else str(value)


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


def format_report(report: dict) -> str:
    members = report["members"]
    unknown = sum(1 for topic in report["topics"] for p in topic["partitions"] if p["lag"] is None)
    lag = f"lag {report['lag']} bytes" + (f" (not known for {unknown} partition{'' if unknown == 1 else 's'})"
                                          if unknown else "")
    out = [f"group {report['group']}: {len(members)} member{'' if len(members) == 1 else 's'}, "
           f"{len(report['topics'])} topic{'' if len(report['topics']) == 1 else 's'}, {lag}", ""]
    if members:
        out.append(_table(["member", "subscription", "streams", "partitions"],
                          [[m["consumer_id"], format_subscription(m["subscription"]), len(m["streams"]),
                            len(m["owned"])] for m in members]))
    else:
        out.append("no members")
    out.append("")
    rows = [[topic["topic"], p["node"], _shown(p["owner"]), _shown(p["committed_offset"]),
             _shown(p["log_end_offset"]), _shown(p["lag"])]
            for topic in report["topics"] for p in topic["partitions"]]
    if rows:
        out.append(_table(["topic", "partition", "owner", "committed", "log_end", "lag"], rows))
    else:
        out.append("no partitions")
    for note in report["notes"]:
        out.append(f"note: {note}")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.group is not None:
            layout.check_group(args.group)
        layout.split_zk_connect(args.zookeeper)
        if args.zk_timeout_ms < 1 or args.broker_timeout_ms < 1:
            raise ValueError("timeouts must be >= 1 ms")
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the connection errors are reported below
    try:
        if args.group is None:
            result = summarize_groups(args.zookeeper, zk_timeout_ms=args.zk_timeout_ms)
            text = json.dumps({"groups": result}, indent=2) if args.json else format_groups(result)
        else:
            result = describe_group(args.zookeeper, args.group, zk_timeout_ms=args.zk_timeout_ms,
                                    broker_timeout_ms=args.broker_timeout_ms)
            text = json.dumps(result, indent=2) if args.json else format_report(result)
    except GroupNotFound:
        print(f"{PROG}: no consumer group {args.group!r} in ZooKeeper at {args.zookeeper}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except ZooKeeperUnavailable as exc:
        print(f"{PROG}: ZooKeeper unreachable: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except ZK_ERRORS as exc:
        print(f"{PROG}: lost ZooKeeper at {args.zookeeper} while reading: {exc!r}", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        print(text, flush=True)
    except BrokenPipeError:
        pass
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
