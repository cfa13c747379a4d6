"""``mpbroker-get-offsets``: the offsets of a topic's partitions before a time, from
the command line (Kafka's GetOffsetShell).

    mpbroker-get-offsets (--broker-list HOST:PORT[,..] | --zookeeper ZK) --topic T
        [--partition P] [--time -1|-2|MS|ISO-8601] [--max-offsets N]

Prints one line per partition, ``<topic>:<partition>:<offset>[,<offset>...]``
(``<topic>:<broker>-<partition>:...`` when several brokers are listed), the offsets
newest first, as the broker's OFFSETS answer gives them. ``--time -1`` (the default)
is the log end, ``-2`` the log start. For any other time a 0.7 broker answers with
segment base offsets, not message offsets: the bases of the segments whose file was
last written at or before the time (led by the log end when the time is now or
later), so the answer's granularity is a segment (``log.file.size``); an empty list
means every segment was written to after the time. Any offset printed starts a
message, so it can be given to ``mpbroker-console-consumer --offset``.

With ``--zookeeper HOST:PORT[,..][/chroot]``: a replicated topic's partitions 0..N-1 are
asked of their current leaders (``<topic>:<partition>:...``; a leader that changes
meanwhile is followed); a topic created the 0.7 way, of the brokers that registered
it (``<topic>:<broker>-<partition>:...``).

A topic none of the brokers has a log for is an error (with ``--zookeeper``: one that
is not in ZooKeeper). Exit codes: 0 done; 1 the
broker answered with an error; 2 bad arguments, an unknown topic or partition; 3 no
broker could be reached. Errors are one line on standard error.
"""

import argparse
import sys

from mpbroker.cli.failure import fail
from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.offset_times import LATEST_TIME, parse_time
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError
from mpbroker.clients.core.leaders import PartitionLeaders
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.core.zk_registry import read_topic_partitions, read_topics
from mpbroker.codec.errors import InvalidTopicError, MPBrokerError
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry.zk_client import ZooKeeperUnavailable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PROG = "mpbroker-get-offsets"


class _UsageError(Exception):
    """Bad input the brokers revealed: an unknown topic or partition."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="print the offsets of a topic's partitions before a time (GetOffsetShell)",
        epilog="A 0.7 broker answers with segment base offsets: the starts of the segments last written at or "
               "before --time, newest first (led by the log end for a time of now or later), so the answer is "
               "as fine as the segments are (log.file.size).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--broker-list", "--bootstrap-server", dest="broker_list", metavar="BROKERS",
                        help="HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...] (--bootstrap-server is the same)")
    source.add_argument("--zookeeper", metavar="ZK",
                        help="find the brokers in ZooKeeper: HOST:PORT[,HOST:PORT...][/chroot]; a replicated topic's "
                             "partitions are asked of their leaders")
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument("--partition", type=int, help="only this partition (of each broker; default: all)")
    parser.add_argument("--time", default=str(LATEST_TIME),
                        help="-1 or latest: the log end (default); -2 or earliest: the log start; or a time, in ms "
                             "since the epoch or ISO-8601 (e.g. 2024-05-01T12:00:00Z; local time without a zone): "
                             "the bases of the segments last written at or before it")
    parser.add_argument("--max-offsets", type=int, default=1,
                        help="at most this many offsets per partition (default 1: the newest)")
    return parser


def main(argv=None, stdout=None) -> int:
    args = _parser().parse_args(argv)
    out = stdout or sys.stdout
    try:
        check_topic(args.topic)
        brokers = parse_broker_list(args.broker_list) if args.broker_list is not None else None
        time_ms = parse_time(args.time)
        if args.partition is not None and args.partition < 0:
            raise ValueError("--partition must be >= 0")
        if args.max_offsets < 1:
            raise ValueError("--max-offsets must be >= 1")
    except (ValueError, InvalidTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    try:
        lines = _offsets(brokers, args, time_ms) if brokers is not None else _offsets_from_zookeeper(args, time_ms)
    except (_UsageError, UnknownTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except (BrokerUnavailableError, ZooKeeperUnavailable) as exc:
        return fail(PROG, exc, EXIT_UNREACHABLE)
    except (ClientError, MPBrokerError) as exc:
        return fail(PROG, exc, EXIT_FAILED)
    try:
        for line in lines:
            print(line, file=out)
        out.flush()
    except BrokenPipeError:
        pass
    return EXIT_OK


def _offsets(brokers, args, time_ms: int) -> list:
    """The output lines; _UsageError for an unknown topic or partition."""
    lines = []
    found = False
    for broker in brokers:
        with SimpleConsumer(broker.host, broker.port) as consumer:
            count = consumer.partition_count(args.topic)
            if args.partition is not None and args.partition >= count:
                raise _UsageError(f"partition {args.partition} of topic {args.topic!r} does not exist on broker "
                                  f"{broker.host}:{broker.port} (it has partitions 0-{count - 1})")
            partitions = range(count) if args.partition is None else [args.partition]
            for partition in partitions:
                offsets = consumer.get_offsets_before(args.topic, partition, time_ms, args.max_offsets)
                label = f"{broker.id}-{partition}" if len(brokers) > 1 else str(partition)
                lines.append(f"{args.topic}:{label}:{','.join(map(str, offsets))}")
            if not found:  # 0.7 answers -1 and -2 with [0] for a topic it has no log of
                found = consumer.topic_has_log(args.topic, count)
    if not found:
        where = ", ".join(f"{broker.host}:{broker.port}" for broker in brokers)
        raise UnknownTopicError([args.topic], f"no partition has a log on {where}")
    return lines


def _offsets_from_zookeeper(args, time_ms: int) -> list:
    """--zookeeper: the lines of a replicated topic (from the leaders) or of a 0.7 topic
    (from the brokers that registered it)."""
    leaders = PartitionLeaders.connect(args.zookeeper)
    try:
        replicated = leaders.topic(args.topic)
        if replicated is None:
            registered = [p for p in read_topic_partitions(leaders.client, args.topic)
                          if p.broker_id in leaders.brokers]
            if not registered:
                raise UnknownTopicError([args.topic], f"no live broker registered it at {args.zookeeper}",
                                        read_topics(leaders.client))
            lines = []
            for broker_id in sorted({p.broker_id for p in registered}):
                broker = leaders.brokers[broker_id]
                with SimpleConsumer(broker.host, broker.port) as consumer:
                    for p in registered:
                        if p.broker_id == broker_id and args.partition in (None, p.partition):
                            offsets = consumer.get_offsets_before(args.topic, p.partition, time_ms, args.max_offsets)
                            lines.append(f"{args.topic}:{p.node()}:{','.join(map(str, offsets))}")
            if not lines:
                raise _UsageError(f"partition {args.partition} of topic {args.topic!r} is on no live broker")
            return lines
        if args.partition is not None and args.partition >= replicated.partitions:
            raise _UsageError(f"partition {args.partition} of topic {args.topic!r} does not exist (it has partitions "
                              f"0-{replicated.partitions - 1})")
        partitions = range(replicated.partitions) if args.partition is None else [args.partition]
        with LeaderConsumer(leaders=leaders) as consumer:
            lines = []
            for partition in partitions:
                offsets = consumer.get_offsets_before(args.topic, partition, time_ms, args.max_offsets)
                lines.append(f"{args.topic}:{partition}:{','.join(map(str, offsets))}")
            return lines
    finally:
        leaders.close()


if __name__ == "__main__":
    sys.exit(main())
