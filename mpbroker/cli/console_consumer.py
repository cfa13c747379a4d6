"""``mpbroker-console-consumer``: print a topic's messages, one per line.

    mpbroker-console-consumer --broker-list HOST:PORT[,..] --topic T [--partition P]
        [--from-beginning | --offset N | --offset-by-time TIME] [--max-messages N]
        [--timeout-ms N] [--wait-for-topic] [--fetch-size N] [--max-fetch-size N]
        [--print-partition] [--print-offset] [--strip-envelopes [--print-envelope]]

    mpbroker-console-consumer --zookeeper ZK [--group G]
        (--topic T | --whitelist REGEX | --blacklist REGEX) [--wait-for-topic]
        [--from-beginning] [--max-messages N] [--timeout-ms N] [--zk-timeout-ms N]
        [--print-partition] [--print-offset] [--strip-envelopes [--print-envelope]]

With ``--broker-list`` (alias ``--bootstrap-server``): reads every partition of the
topic on every listed broker (or partition P of each) from the latest offset, the
earliest (``--from-beginning``), ``--offset N`` or ``--offset-by-time TIME`` (the
segment base OFFSETS gives for that time: ``mpbroker.clients.consumer.offset_times``), with one
MULTIFETCH per broker and round. ``--print-partition`` prints ``<partition>``
(``<broker>-<partition>`` when several brokers are listed). An ``--offset`` outside
the log, or inside a message (offsets are byte positions: only the offsets printed by
``--print-offset``, the log's start and end and segment bases start a message), is an
error naming the log's ends or the nearest earlier message start. A topic no listed
broker has a log of is an error unless ``--wait-for-topic``; an existing topic without
messages is waited for. A message larger than the fetch size is fetched again with a
larger one, up to ``--max-fetch-size``. When retention deletes the segment being read,
reading restarts at the earliest offset, with a warning.

With ``--zookeeper HOST:PORT[,..][/chroot]`` (``zk.connect``): consumes as a member of
the consumer group ``--group`` (default: a new ``console-consumer-<n>``, removed from
ZooKeeper again on exit, as 0.7 did) through the ZooKeeper consumer connector, with
one stream over the topic, or over every topic a ``--whitelist``/``--blacklist``
regular expression takes (now and later). A ``--topic`` no broker registered is an
error (with the registered topics that look like it) unless ``--wait-for-topic``. The
group's partitions are shared with its other members; each starts at the group's
committed offset, or without one at the latest offset (the earliest with
``--from-beginning``: ``autooffset.reset``). ``--print-partition`` prints
``<broker>-<partition>``. On exit -- ``--max-messages``, ``--timeout-ms``, SIGINT or
SIGTERM -- the offsets of everything printed are committed, so a rerun with the same
group goes on where this one stopped.

``--strip-envelopes`` prints the payloads inside producers' audit envelopes
(``mpbroker.clients.core.envelope``; other payloads as they are); ``--print-envelope`` adds
``<created ms> <host>/<client>\\t`` (``-\\t`` for a message without one).

Output: the payload, preceded by the partition and ``\\t`` with
``--print-partition`` and by ``offset=<offset> next_offset=<next offset>\\t`` with
``--print-offset``: where the message starts (``--offset`` with it prints it again;
the messages of a compressed set share its start) and where the next one starts (what
a consumer commits). Stops after ``--max-messages``, or once ``--timeout-ms`` passed
without a new message. Messages are fetchable once the broker flushed them
(``log.flush.interval`` messages or ``log.default.flush.interval.ms``).

Exit codes: 0 done (also after SIGINT/SIGTERM with ``--zookeeper``); 1 an error while
reading (a damaged message, after the valid ones before it; a message larger than
``--max-fetch-size``); 2 bad arguments or input (an offset outside the log or inside a
message, an unknown topic or partition); 3 no broker could be reached
(``--broker-list``) or no ZooKeeper server answered within ``--zk-timeout-ms``
(``--zookeeper``). Errors are one line on standard error.
"""

import argparse
import itertools
import logging
import random
import signal
import sys
import threading
import time

from kazoo.exceptions import NoNodeError

from mpbroker.clients.consumer.offset_times import parse_time, start_offset_for_time
from mpbroker.clients.consumer.simple_consumer import MAX_FETCH_SIZE_LIMIT, SimpleConsumer
from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.clients.core.envelope import EnvelopeError
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError, NotAMessageBoundaryError
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.core.zk_registry import read_topics
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
from mpbroker.clients.groups.settings import ConsumerSettings
from mpbroker.clients.groups.topic_filter import Blacklist, Whitelist
from mpbroker.codec.errors import (
    InvalidTopicError,
    MessageSizeTooLargeError,
    MPBrokerError,
    OffsetOutOfRangeError,
)
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable, close_client, start_client

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_FETCH_SIZE = 1024 * 1024
DEFAULT_MAX_FETCH_SIZE = 64 * 1024 * 1024
MAX_IDLE_SLEEP_S = 0.5
PROG = "mpbroker-console-consumer"
ZK_TIMEOUT_MS = 6000  # --zk-timeout-ms: 0.7's zk.connectiontimeout.ms
POLL_MS = 200  # --zookeeper: longest wait on the stream before looking at signals and --timeout-ms
FLUSH_INTERVAL_S = 0.2  # --zookeeper: output is flushed at least this often while messages flow

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
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


def _check_arguments(args) -> None:
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


class _Stream:
    __slots__ = ("label", "partition", "offset", "fetch_size", "log_end")

    def __init__(self, label: bytes, partition: int, offset: int, fetch_size: int, log_end: int):
        self.label = label
        self.partition = partition
        self.offset = offset
        self.fetch_size = fetch_size
        self.log_end = log_end  # when the consumer started


def _streams(consumer, broker, args, several_brokers: bool) -> list:
    """The partitions to read on ``broker`` and where each starts. Raises ValueError
    for a partition the broker does not have, OffsetOutOfRangeError for an --offset
    outside the log."""
    count = consumer.partition_count(args.topic)
    if args.partition is not None:
        if args.partition >= count:
            raise ValueError(f"partition {args.partition} of topic {args.topic!r} does not exist on broker "
                             f"{broker.host}:{broker.port} (it has partitions 0-{count - 1})")
        partitions = [args.partition]
    else:
        partitions = range(count)
    streams = []
    for partition in partitions:
        log_end = consumer.latest_offset(args.topic, partition)
        if args.offset is not None:
            consumer.check_offset(args.topic, partition, args.offset)
            offset = args.offset
        elif args.offset_by_time is not None:
            offset = start_offset_for_time(consumer, args.topic, partition, args.start_time)
        elif args.from_beginning:
            offset = consumer.earliest_offset(args.topic, partition)
        else:
            offset = log_end
        label = f"{broker.id}-{partition}" if several_brokers else str(partition)
        streams.append(_Stream(label.encode(), partition, offset, args.fetch_size, log_end))
    return streams


def _topic_exists(plan, topic: str) -> bool:
    """Whether some partition of ``topic`` has a log on some broker (0.7 brokers make a
    partition's log at its first message; before that OFFSETS says nothing else)."""
    return any(consumer.topic_has_log(topic) for consumer, _ in plan)


def main(argv=None, stdout=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    out = stdout or sys.stdout.buffer
    try:
        _check_arguments(args)
        brokers = None if args.zookeeper is not None else parse_broker_list(args.broker_list)
    except (ValueError, InvalidTopicError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.zookeeper is not None:
        return _group_main(args, out)
    consumers = []
    try:
        plan = []
        try:
            for broker in brokers:
                consumer = SimpleConsumer(broker.host, broker.port, fetch_size=args.fetch_size,
                                          max_fetch_size=args.max_fetch_size, audit_envelope=args.strip_envelopes)
                consumers.append(consumer)
                plan.append((consumer, _streams(consumer, broker, args, len(brokers) > 1)))
            if all(stream.log_end == 0 for _, streams in plan for stream in streams):
                where = ", ".join(f"{broker.host}:{broker.port}" for broker in brokers)
                if _topic_exists(plan, args.topic):
                    print(f"{PROG}: topic {args.topic!r} has no messages yet; waiting", file=sys.stderr)
                elif args.wait_for_topic:
                    print(f"{PROG}: topic {args.topic!r} does not exist yet on {where}; waiting (--wait-for-topic)",
                          file=sys.stderr)
                else:
                    raise UnknownTopicError([args.topic], f"no partition has a log on {where}",
                                            hint="--wait-for-topic waits for it")
        except (ValueError, OffsetOutOfRangeError) as exc:  # UnknownTopicError is a ValueError
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return _consume(plan, args, out)
    except BrokerUnavailableError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except NotAMessageBoundaryError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MessageSizeTooLargeError as exc:
        print(f"{PROG}: {exc}; a larger --max-fetch-size reads it", file=sys.stderr)
        return EXIT_FAILED
    except (MPBrokerError, EnvelopeError, ClientError) as exc:  # ClientError: e.g. an unknown error code
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    finally:
        for consumer in consumers:
            consumer.close()


def _offset_label(offset: int, next_offset: int) -> bytes:
    return b"offset=%d next_offset=%d\t" % (offset, next_offset)


def _consume(plan, args, out) -> int:
    if args.max_messages == 0:
        return EXIT_OK
    printed = 0
    last_data = time.monotonic()
    idle_sleep = 0.0
    while True:
        got_any = False
        for consumer, streams in plan:
            if not streams:
                continue
            answers = consumer.multifetch([(args.topic, s.partition, s.offset, s.fetch_size) for s in streams])
            for stream, message_set in zip(streams, answers):
                if message_set.error:
                    try:
                        message_set.check()
                    except OffsetOutOfRangeError:
                        stream.offset = _restart_after_out_of_range(consumer, args.topic, stream)
                        continue
                if not message_set.payloads:
                    if message_set.size:  # a message larger than the fetch size, or no message starts here
                        stream.fetch_size = consumer.grow_fetch_size(message_set, stream.fetch_size)
                    continue
                got_any = True
                envelopes = message_set.envelopes or itertools.repeat(None)
                starts = message_set.offsets if args.print_offset else itertools.repeat(None)
                for payload, start, next_offset, envelope in zip(message_set.payloads, starts,
                                                                 message_set.next_offsets, envelopes):
                    prefix = b""
                    if args.print_partition:
                        prefix += stream.label + b"\t"
                    if args.print_offset:
                        prefix += _offset_label(start, next_offset)
                    if args.print_envelope:
                        prefix += _envelope_label(envelope)
                    out.write(prefix + payload + b"\n")
                    printed += 1
                    if args.max_messages is not None and printed >= args.max_messages:
                        out.flush()
                        return EXIT_OK
                stream.offset = message_set.next_offset
                stream.fetch_size = args.fetch_size
                if message_set.corrupt is not None:  # the messages before it are printed
                    out.flush()
                    raise message_set.corrupt
        out.flush()
        now = time.monotonic()
        if got_any:
            last_data = now
            idle_sleep = 0.0
            continue
        if args.timeout_ms is not None and (now - last_data) * 1000 >= args.timeout_ms:
            return EXIT_OK
        idle_sleep = min(MAX_IDLE_SLEEP_S, idle_sleep + 0.02)
        time.sleep(idle_sleep)


def _restart_after_out_of_range(consumer, topic: str, stream) -> int:
    """A position that left the log while reading: retention deleted the segment being
    read (restart at the earliest offset, with a warning); anything else is an error."""
    exc = consumer.out_of_range_error(topic, stream.partition, stream.offset)
    if exc.log_start is None or stream.offset >= exc.log_start:
        raise exc
    print(f"{PROG}: {exc}; restarting at {exc.log_start}", file=sys.stderr)
    return exc.log_start


# --- --zookeeper: a member of a consumer group ----------------------------------------------


def _group_settings(args, group: str):
    """The connector's settings (ValueError on a bad group, zk.connect or size)."""
    zk_timeout_ms = args.zk_timeout_ms if args.zk_timeout_ms is not None else ZK_TIMEOUT_MS
    poll_ms = POLL_MS if args.timeout_ms is None else min(args.timeout_ms, POLL_MS)
    return ConsumerSettings.from_properties({
        "zk.connect": args.zookeeper, "groupid": group,
        "autooffset.reset": "smallest" if args.from_beginning else "largest",
        "consumer.timeout.ms": poll_ms,  # the tool applies --timeout-ms itself, see _consume_group
        "zk.connectiontimeout.ms": zk_timeout_ms, "fetch.size": args.fetch_size,
        "max.fetch.size": args.max_fetch_size, "audit.envelope": args.strip_envelopes,
    })


def _group_main(args, out) -> int:
    generated = args.group is None
    group = args.group if not generated else _random_group()
    try:
        settings = _group_settings(args, group)
        layout.split_zk_connect(args.zookeeper)
        topic_filter = None
        if args.whitelist is not None:
            topic_filter = Whitelist(args.whitelist)
        elif args.blacklist is not None:
            topic_filter = Blacklist(args.blacklist)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"{PROG}: %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its retries say nothing our messages do not

    stop = threading.Event()
    previous = _install_stop_handlers(stop)
    try:
        try:
            if generated or (args.topic is not None and not args.wait_for_topic):
                group = _look_up(args, None if generated else group, settings.zk_connectiontimeout_ms)
                settings = _group_settings(args, group)
            connector = ConsumerConnector(settings)
        except UnknownTopicError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except ZooKeeperUnavailable as exc:
            print(f"{PROG}: ZooKeeper unreachable: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except ZK_ERRORS as exc:
            print(f"{PROG}: ZooKeeper failed: {exc!r}", file=sys.stderr)
            return EXIT_UNREACHABLE
        try:
            if args.max_messages == 0 or stop.is_set():
                return EXIT_OK
            if topic_filter is not None:
                (stream,) = connector.create_message_streams_by_filter(topic_filter, 1)
            else:
                (stream,) = connector.create_message_streams({args.topic: 1})[args.topic]
            code = _consume_group(stream, args, out, stop)
            unreadable = connector.unreadable_partitions()
            for topic, node, offset, why in unreadable:  # the fetchers stopped there rather than skip
                print(f"{PROG}: {topic}-{node} stopped at offset {offset}: {why}", file=sys.stderr)
            return EXIT_FAILED if unreadable and code == EXIT_OK else code
        except ZK_ERRORS as exc:
            print(f"{PROG}: ZooKeeper failed: {exc!r}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except (MPBrokerError, EnvelopeError) as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            connector.shutdown()  # commits the offsets of everything printed, leaves the group
            if generated:
                _remove_group(args.zookeeper, group, settings.zk_connectiontimeout_ms)
    finally:
        _restore_handlers(previous)


def _install_stop_handlers(stop) -> dict:
    """SIGINT and SIGTERM set ``stop``: the loop ends, commits and leaves the group."""
    def on_signal(signum, frame):
        stop.set()

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # main() called from another thread: leave signals alone
            break
    return previous


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _consume_group(stream, args, out, stop) -> int:
    """Print from ``stream`` until --max-messages, --timeout-ms or a signal. The stream
    raises ConsumerTimeoutError after at most POLL_MS without a message, so a signal
    is seen within that time and --timeout-ms is measured here."""
    printed = 0
    last_message = last_flush = time.monotonic()
    timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    try:
        while not stop.is_set():
            if args.max_messages is not None and printed >= args.max_messages:
                break
            try:
                message = next(stream)
            except ConsumerTimeoutError:
                out.flush()
                now = last_flush = time.monotonic()
                if timeout_s is not None and now - last_message >= timeout_s:
                    break
                continue
            except StopIteration:  # the connector was shut down
                break
            prefix = b""
            if args.print_partition:
                prefix += b"%d-%d\t" % (message.broker_id, message.partition)
            if args.print_offset:
                prefix += _offset_label(message.offset, message.next_offset)
            if args.print_envelope:
                prefix += _envelope_label(message.envelope)
            out.write(prefix + message.payload + b"\n")
            printed += 1
            now = last_message = time.monotonic()
            if now - last_flush >= FLUSH_INTERVAL_S:
                out.flush()
                last_flush = now
        out.flush()
    except BrokenPipeError:
        pass
    return EXIT_OK


def _envelope_label(envelope) -> bytes:
    if envelope is None:
        return b"-\t"
    return f"{envelope.created_ms} {envelope.host}/{envelope.client}\t".encode()


def _random_group() -> str:
    return f"console-consumer-{random.randrange(100000)}"


def _look_up(args, group: str | None, timeout_ms: int) -> str:
    """Before joining: check that ``--topic`` exists (UnknownTopicError naming the
    registered topics that look like it, unless --wait-for-topic) and, when ``group``
    is None, pick a generated group name no group in ZooKeeper has (it is removed on
    exit). Returns the group."""
    client = start_client(args.zookeeper, timeout_ms, timeout_ms)
    try:
        if args.topic is not None and not args.wait_for_topic:
            topics = read_topics(client)
            if args.topic not in topics:
                raise UnknownTopicError([args.topic], f"no broker registered it at {args.zookeeper}", topics,
                                        hint="--wait-for-topic waits for it")
        while group is None:
            candidate = _random_group()
            if client.exists(layout.group_path(candidate)) is None:
                group = candidate
        return group
    finally:
        close_client(client)


def _remove_group(zk_connect: str, group: str, timeout_ms: int) -> None:
    """Delete a generated group's nodes (its offsets are of no use to anyone), as 0.7's
    console consumer did for the group it made up."""
    try:
        client = start_client(zk_connect, timeout_ms, timeout_ms)
    except ZooKeeperUnavailable as exc:
        log.warning("could not remove group %s: %s", group, exc)
        return
    try:
        client.delete(layout.group_path(group), recursive=True)
    except NoNodeError:
        pass
    except ZK_ERRORS as exc:
        log.warning("could not remove group %s: %r", group, exc)
    finally:
        close_client(client)


if __name__ == "__main__":
    sys.exit(main())
