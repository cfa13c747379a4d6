"""``mpbroker-get-offsets``: the offsets of a topic's partitions before a time, from
the command line (Kafka's GetOffsetShell).

    mpbroker-get-offsets --broker-list HOST:PORT[,..] --topic T [--partition P]
        [--time -1|-2|MS|ISO-8601] [--max-offsets N]

Prints one line per partition, ``<topic>:<partition>:<offset>[,<offset>...]``
(``<topic>:<broker>-<partition>:...`` when several brokers are listed), the offsets
newest first, as the broker's OFFSETS answer gives them. ``--time -1`` (the default)
is the log end, ``-2`` the log start. For any other time a 0.7 broker answers with
segment base offsets, not message offsets: the bases of the segments whose file was
last written at or before the time (led by the log end when the time is now or
later), so the answer's granularity is a segment (``log.file.size``); an empty list
means every segment was written to after the time. Any offset printed starts a
message, so it can be given to ``mpbroker-console-consumer --offset``.

A topic none of the brokers has a log for is an error. Exit codes: 0 done; 1 the
broker answered with an error; 2 bad arguments, an unknown topic or partition; 3 no
broker could be reached. Errors are one line on standard error.
"""

import argparse
import sys

from mpbroker.cli.failure import fail
from mpbroker.clients.consumer.offset_times import LATEST_TIME, parse_time
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.codec.errors import InvalidTopicError, MPBrokerError
from mpbroker.codec.topic_names import check_topic

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
    parser.add_argument("--broker-list", "--bootstrap-server", dest="broker_list", metavar="BROKERS", required=True,
                        help="HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...] (--bootstrap-server is the same)")
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
        brokers = parse_broker_list(args.broker_list)
        time_ms = parse_time(args.time)
        if args.partition is not None and args.partition < 0:
            raise ValueError("--partition must be >= 0")
        if args.max_offsets < 1:
            raise ValueError("--max-offsets must be >= 1")
    except (ValueError, InvalidTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    try:
        lines = _offsets(brokers, args, time_ms)
    except (_UsageError, UnknownTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except BrokerUnavailableError as exc:
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


if __name__ == "__main__":
    sys.exit(main())
