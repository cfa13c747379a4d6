"""``mpbroker-groups``: the consumer groups, what one of them is doing, and changing one
(its offsets reset, or the group deleted), as ``kafka-consumer-groups`` does. Two kinds
of groups, each reached its own way:

    mpbroker-groups (--zookeeper ZK | --bootstrap-server HOST:PORT) [--list] [--json]
    mpbroker-groups (--zookeeper ZK | --bootstrap-server HOST:PORT) [--describe] --group G [--json]
    mpbroker-groups (--zookeeper ZK | --bootstrap-server HOST:PORT) --group G --reset-offsets
        (--to-earliest | --to-latest | --to-datetime ISO | --to-offset N | --shift-by N)
        [--topic T[:...]]... [--execute] [--json]
    mpbroker-groups (--zookeeper ZK | --bootstrap-server HOST:PORT) --group G --delete [--json]

**--zookeeper HOST:PORT[,..][/chroot]**: the ZooKeeper groups of 0.7 clients, in the
``zk.connect`` of the cluster (``mpbroker.cli.groups_zookeeper``). Without ``--group``:
one line per group (members, topics with owners or offsets); ``--list``: the group names
alone. ``--group`` (or ``--describe --group``): its members and their subscriptions,
then per topic and partition the owning stream, the committed offset, the log end
(OFFSETS latest from the broker holding the partition), the lag (log end - committed,
in bytes: offsets are byte positions) and the lag in messages (counted from one fetch
at the committed offset when it reached the log end, else ``~N``: estimated from that
fetch's bytes per message, see ``mpbroker.clients.groups.lag_estimate``); ``-`` where a
value is unknown, with the reason below the table. ``--json`` prints
``mpbroker.clients.groups.report``'s dict instead. These read only.
``--reset-offsets`` prints the plan (topic, broker-partition, current offset, new
offset) and writes nothing unless ``--execute`` is given; the new offsets come from the
brokers (``mpbroker.clients.groups.offset_targets``: ``--to-datetime`` has a segment's
granularity; ``--to-offset`` must start a whole message inside the log; no
``--shift-by``: a shifted byte offset would rarely start a message). The partitions:
every one of the topics the group has offsets for, or of the ``--topic``s named (a
topic's registered partitions plus those the group has offsets for; ``T:1-0,2-3``
narrows to broker 1 partition 0 and broker 2 partition 3, ``T:0`` to partition 0 on
every broker). Offsets can be given to a group that does not exist yet (name the
topics). ``--delete`` removes ``/consumers/<group>`` with its offsets. Both refuse while
the group has live members (a member would commit over the new offsets, or recreate the
deleted group); a dry run shows the plan and says so. See
``mpbroker.clients.groups.admin``.

**--bootstrap-server HOST:PORT[,...]**: the modern groups (Kafka clients with
``group.id``) that the brokers' ``kafka.port`` coordinates (``mpbroker.cli.groups_modern``,
``mpbroker.clients.modern_groups``). ``--list``: the group ids (ListGroups on every
broker); without ``--group``: one line per group with its state and members;
``--describe --group``: its state and members (client id, host, the partitions each was
assigned), then per partition the committed offset, the log end (ListOffsets latest),
the lag (log end - committed, in offsets: byte positions here) and the member that owns
it. ``--reset-offsets`` works as above, with the targets resolved by ListOffsets at the
partitions' leaders (``--to-datetime``: the first record at or after it; ``--to-offset
N``: any offset in [log start, log end], where a consumer starts at the first record at
or after N; ``--shift-by N``: the committed offset plus N, clamped into the log) and
``--topic T`` or ``T:0,2`` (partition numbers); it is refused, dry run included, unless
the group is inactive (Empty, or Dead: not known yet), as Kafka's tool refuses it, and
``--execute`` commits the plan at the coordinator (generation -1, no member id).
``--delete`` is DeleteGroups (refused for a non-empty group). ``--broker-timeout-ms``
bounds each request.

Exit codes: 0 done (a dry run printed); 1 no such group, the group has live (active)
members, it changed while being written (nothing written), or a broker answered with an
error; 2 bad arguments or input (an offset that is outside the log or does not start a
message, a topic or partition that does not exist); 3 no ZooKeeper server answered within
``--zk-timeout-ms`` (or the connection was lost), or a broker needed (holding a partition
of the plan, or the bootstrap servers) is not registered or does not answer.
"""

import argparse
import logging
import sys

from mpbroker.cli.failure import fail
from mpbroker.cli.groups_tables import Refused

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PROG = "mpbroker-groups"
MODERN_TIMEOUT_MS = 10000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="list the consumer groups, describe one, reset its "
                                                            "offsets or delete it")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="ZK", help="HOST:PORT[,HOST:PORT...][/chroot] (zk.connect): the "
                                                         "ZooKeeper groups of 0.7 clients")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="HOST:PORT[,HOST:PORT...] of brokers' kafka.port: the modern groups (group.id)")
    parser.add_argument("--group", help="the group to describe (the default with --group), reset or delete")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--list", action="store_true", help="print the names of the groups, one per line")
    actions.add_argument("--describe", action="store_true",
                         help="with --group: members, owners, offsets and lag")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="with --group and one --to-* (or --shift-by): print the new offsets (dry run), write "
                              "them with --execute; refused while the group has live members")
    actions.add_argument("--delete", action="store_true",
                         help="with --group: delete the group and its offsets; refused while it has live members")
    targets = parser.add_mutually_exclusive_group()
    targets.add_argument("--to-earliest", action="store_true", help="reset to each partition's earliest offset")
    targets.add_argument("--to-latest", action="store_true", help="reset to each partition's log end")
    targets.add_argument("--to-datetime", metavar="ISO",
                         help="ZooKeeper: the start of the newest segment last written at or before this time; "
                              "modern: the first record at or after it (ISO 8601, e.g. 2024-05-01T12:00:00+00:00; "
                              "no zone: local time)")
    targets.add_argument("--to-offset", metavar="N", type=int,
                         help="reset to this offset (a byte position: ZooKeeper: it must start a message; modern: "
                              "any offset in the log)")
    targets.add_argument("--shift-by", metavar="N", type=int,
                         help="modern groups: move each committed offset by N (offsets, roughly bytes here), "
                              "clamped into the log")
    parser.add_argument("--topic", action="append", default=[], metavar="T[:...]",
                        help="with --reset-offsets: only this topic (repeatable); ZooKeeper: T:1-0,2-3 names "
                             "broker-partitions, T:0 partition 0 on every broker; modern: T:0,2 names partitions "
                             "(default: every topic the group has offsets for)")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: write the offsets")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--zk-timeout-ms", type=int, default=None,
                        help="give up when no ZooKeeper server answered within this (default 10000)")
    parser.add_argument("--broker-timeout-ms", type=int, default=None,
                        help="connect/answer timeout of each broker asked (default 3000 with --zookeeper, "
                             f"{MODERN_TIMEOUT_MS} with --bootstrap-server)")
    return parser


def _check_common(args) -> None:
    """ValueError for a combination the parser cannot refuse by itself (either kind)."""
    target_given = args.to_earliest or args.to_latest or args.to_datetime is not None or \
        args.to_offset is not None or args.shift_by is not None
    if args.list and args.group is not None:
        raise ValueError("--list lists every group: leave out --group (or use --describe)")
    if (args.describe or args.reset_offsets or args.delete) and args.group is None:
        action = "--describe" if args.describe else "--reset-offsets" if args.reset_offsets else "--delete"
        raise ValueError(f"{action} needs --group G")
    if args.reset_offsets and not target_given:
        raise ValueError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --to-offset, "
                         "--shift-by")
    if not args.reset_offsets and (target_given or args.topic or args.execute):
        raise ValueError("--to-*, --shift-by, --topic and --execute go with --reset-offsets")
    if args.to_offset is not None and args.to_offset < 0:
        raise ValueError(f"--to-offset {args.to_offset}: offsets are >= 0")


def _check_zookeeper(args) -> None:
    from mpbroker.clients.groups import admin as group_admin
    from mpbroker.clients.groups.offset_targets import EARLIEST, LATEST, Target
    from mpbroker.clients.groups.report import BROKER_TIMEOUT_MS, ZK_TIMEOUT_MS
    from mpbroker.registry import layout

    args.zk_timeout_ms = ZK_TIMEOUT_MS if args.zk_timeout_ms is None else args.zk_timeout_ms
    args.broker_timeout_ms = BROKER_TIMEOUT_MS if args.broker_timeout_ms is None else args.broker_timeout_ms
    if args.group is not None:
        layout.check_group(args.group)
    layout.split_zk_connect(args.zookeeper)
    if args.zk_timeout_ms < 1 or args.broker_timeout_ms < 1:
        raise ValueError("timeouts must be >= 1 ms")
    _check_common(args)
    if args.shift_by is not None:
        raise ValueError("--shift-by goes with --bootstrap-server: a ZooKeeper group's offset must start a message, "
                         "which a shifted byte position rarely does (use --to-offset)")
    args.selections = [group_admin.parse_topic_selection(text) for text in args.topic]
    if args.to_datetime is not None:
        args.target = Target.parse_datetime(args.to_datetime)
    elif args.to_offset is not None:
        args.target = Target.at(args.to_offset)
    else:
        args.target = EARLIEST if args.to_earliest else LATEST


def _check_modern(args) -> None:
    from mpbroker.clients.modern_groups.changes import parse_topic_selection
    from mpbroker.clients.modern_groups.targets import Target

    if args.zk_timeout_ms is not None:
        raise ValueError("--zk-timeout-ms goes with --zookeeper (use --broker-timeout-ms)")
    args.broker_timeout_ms = MODERN_TIMEOUT_MS if args.broker_timeout_ms is None else args.broker_timeout_ms
    if args.broker_timeout_ms < 1:
        raise ValueError("timeouts must be >= 1 ms")
    for server in args.bootstrap_server.split(","):
        host, colon, port = server.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--bootstrap-server {args.bootstrap_server!r}: HOST:PORT[,HOST:PORT...]")
    if args.group is not None and not args.group:
        raise ValueError("--group: a group id is not empty")
    _check_common(args)
    args.selections = [parse_topic_selection(text) for text in args.topic]
    if args.to_datetime is not None:
        args.target = Target.parse_datetime(args.to_datetime)
    elif args.to_offset is not None:
        args.target = Target.at(args.to_offset)
    elif args.shift_by is not None:
        args.target = Target.shift(args.shift_by)
    else:
        args.target = Target("earliest" if args.to_earliest else "latest")


def _run_zookeeper(args) -> tuple:
    from mpbroker.cli import groups_zookeeper
    from mpbroker.clients.groups.report import GroupNotFound
    from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the connection errors are reported below
    try:
        return groups_zookeeper.run(args)
    except GroupNotFound:
        raise Refused(EXIT_NOT_FOUND, f"no consumer group {args.group!r} in ZooKeeper at {args.zookeeper}") from None
    except ZooKeeperUnavailable as exc:
        raise Refused(EXIT_UNREACHABLE, f"ZooKeeper unreachable: {exc}") from None
    except ZK_ERRORS as exc:
        raise Refused(EXIT_UNREACHABLE, f"lost ZooKeeper at {args.zookeeper}: {exc!r}") from None


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        (_check_zookeeper if args.zookeeper is not None else _check_modern)(args)
    except ValueError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(message)s")
    try:
        if args.zookeeper is not None:
            text, code = _run_zookeeper(args)
        else:
            from mpbroker.cli import groups_modern

            text, code = groups_modern.run(args)
    except Refused as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr)
        return exc.code
    try:
        if text:
            print(text, flush=True)
    except BrokenPipeError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
