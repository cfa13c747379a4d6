"""The command line of ``mpbroker-console-consumer``: its options, their checks, its exit codes.

This module owns the argparse parser (every option with its help), the checks argparse
cannot express (which options go with ``--broker-list`` and which with ``--zookeeper``,
sizes, parsing ``--offset-by-time``), the defaults those options fall back on, and the
program name and exit codes both reading modes report with. What the tool does with the
options is documented in ``mpbroker.cli.console_consumer``.
"""

import argparse

from mpbroker.clients.consumer.offset_times import parse_time
from mpbroker.clients.consumer.simple_consumer import MAX_FETCH_SIZE_LIMIT
from mpbroker.codec.topic_names import check_topic

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_FETCH_SIZE = 1024 * 1024
DEFAULT_MAX_FETCH_SIZE = 64 * 1024 * 1024
PROG = "mpbroker-console-consumer"
ZK_TIMEOUT_MS = 6000  # --zk-timeout-ms: 0.7's zk.connectiontimeout.ms


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="print the messages of a topic, one per line",
        epilog="A message is fetchable once the broker flushed it: after log.flush.interval messages or "
               "log.default.flush.interval.ms (3000 by default). Exit codes: 0 done, 1 a read error, 2 bad "
               "arguments or input (an offset outside the log or inside a message, an unknown topic), 3 no broker "
               "or ZooKeeper reachable.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--broker-list", "--bootstrap-server", dest="broker_list", metavar="BROKERS",
                        help="read from these brokers: HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...] "
                             "(--bootstrap-server is the same)")
    source.add_argument("--zookeeper", metavar="ZK",
                        help="consume as a member of a consumer group: HOST:PORT[,HOST:PORT...][/chroot] "
                             "(zk.connect)")
    parser.add_argument("--group", help="--zookeeper: the consumer group (default: a new console-consumer-<n>, "
                                        "removed again on exit)")
    topics = parser.add_mutually_exclusive_group()
    topics.add_argument("--topic", help="the topic to read")
    topics.add_argument("--whitelist", metavar="REGEX", help="--zookeeper: every topic the regex matches in full")
    topics.add_argument("--blacklist", metavar="REGEX", help="--zookeeper: every topic the regex does not match")
    parser.add_argument("--wait-for-topic", action="store_true",
                        help="a topic that does not exist yet is waited for (without it: an error, exit code 2)")
    parser.add_argument("--partition", type=int, help="--broker-list: only this partition (of each broker)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (--zookeeper: where the group has no offset yet)")
    start.add_argument("--offset", type=int,
                       help="--broker-list: start at this offset (needs --partition); it must start a message: "
                            "an offset=... that --print-offset printed, a log start or end, a segment base")
    start.add_argument("--offset-by-time", metavar="TIME",
                       help="--broker-list: start where OFFSETS puts TIME (ms since the epoch or ISO-8601, "
                            "e.g. 2024-05-01T12:00:00Z; local time without a zone): the start of the newest "
                            "segment last written at or before TIME, so older messages come too (that segment and "
                            "the first of the next: segments are log.file.size); a TIME before every segment starts "
                            "at the earliest offset")
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument("--timeout-ms", type=int, help="stop after this long without a new message")
    parser.add_argument("--print-partition", action="store_true",
                        help="prefix <partition> (<broker>-<partition> with several brokers or --zookeeper) and TAB")
    parser.add_argument("--print-offset", action="store_true",
                        help="prefix 'offset=<offset> next_offset=<next offset>' and TAB: where the message starts "
                             "(give it to --offset to read the message again) and where the next one starts (what "
                             "a consumer commits)")
    parser.add_argument("--print-timestamp", action="store_true",
                        help="prefix 'timestamp=<ms>' and TAB: a record's timestamp (-1: none; a 0.7 message has none: "
                             "'timestamp=-')")
    parser.add_argument("--print-headers", action="store_true",
                        help="prefix a record's headers as <key>:<value>,... (NO_HEADERS without any; a null value: "
                             "null) and TAB")
    parser.add_argument("--print-key", action="store_true",
                        help="prefix a record's key (null without one, as for every 0.7 message) and TAB")
    parser.add_argument("--strip-envelopes", action="store_true",
                        help="print payloads without the producers' audit envelopes (others as they are)")
    parser.add_argument("--print-envelope", action="store_true",
                        help="with --strip-envelopes: prefix <created ms> <host>/<client> (- without an envelope)")
    parser.add_argument("--fetch-size", type=int, default=DEFAULT_FETCH_SIZE,
                        help=f"bytes per partition and fetch (default {DEFAULT_FETCH_SIZE})")
    parser.add_argument("--max-fetch-size", type=int,
                        help="a message larger than --fetch-size is fetched with a fetch size up to this; a larger "
                             f"one is an error (default {DEFAULT_MAX_FETCH_SIZE}, or --fetch-size if larger)")
    parser.add_argument("--zk-timeout-ms", type=int,
                        help=f"--zookeeper: give up when no server answered within this (default {ZK_TIMEOUT_MS})")
    return parser


def check_arguments(args) -> None:
    """Mode-dependent checks argparse cannot express; ValueError on a bad combination."""
    if args.max_messages is not None and args.max_messages < 0:
        raise ValueError("--max-messages must be >= 0")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise ValueError("--timeout-ms must be >= 0")
    if args.print_envelope and not args.strip_envelopes:
        raise ValueError("--print-envelope needs --strip-envelopes")
    if args.max_fetch_size is None:
        args.max_fetch_size = max(args.fetch_size, DEFAULT_MAX_FETCH_SIZE)
    if not 0 < args.fetch_size <= args.max_fetch_size <= MAX_FETCH_SIZE_LIMIT:
        raise ValueError(f"need 0 < --fetch-size <= --max-fetch-size <= {MAX_FETCH_SIZE_LIMIT}")
    if args.zookeeper is None:
        for name in ("group", "whitelist", "blacklist", "zk_timeout_ms"):
            if getattr(args, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} needs --zookeeper")
        if args.topic is None:
            raise ValueError("--topic is required")
        check_topic(args.topic)
        if args.offset is not None and args.partition is None:
            raise ValueError("--offset needs --partition")
        if args.partition is not None and args.partition < 0:
            raise ValueError("--partition must be >= 0")
        if args.offset_by_time is not None:
            args.start_time = parse_time(args.offset_by_time)
        return
    for name in ("partition", "offset", "offset_by_time"):
        if getattr(args, name) is not None:
            raise ValueError(f"--{name.replace('_', '-')} cannot be used with --zookeeper (the group assigns the "
                             f"partitions and keeps their offsets)")
    if args.topic is None and args.whitelist is None and args.blacklist is None:
        raise ValueError("--zookeeper needs --topic, --whitelist or --blacklist")
    if args.topic is not None:
        check_topic(args.topic)
    if args.zk_timeout_ms is not None and args.zk_timeout_ms < 1:
        raise ValueError("--zk-timeout-ms must be >= 1")
