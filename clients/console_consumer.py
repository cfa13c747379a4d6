"""``mpbroker-console-consumer``: print a topic's messages, one per line.

    mpbroker-console-consumer --broker-list HOST:PORT[,..] --topic T [--partition P]
        [--from-beginning] [--offset N] [--max-messages N] [--timeout-ms N]
        [--print-partition] [--print-offset] [--strip-envelopes [--print-envelope]]

    mpbroker-console-consumer --zookeeper ZK [--group G]
        (--topic T | --whitelist REGEX | --blacklist REGEX)
        [--from-beginning] [--max-messages N] [--timeout-ms N] [--zk-timeout-ms N]
        [--print-partition] [--print-offset] [--strip-envelopes [--print-envelope]]

With ``--broker-list``: reads every partition of the topic on every listed broker (or
partition P of each) from the latest offset, the earliest (``--from-beginning``) or
``--offset N``, with one MULTIFETCH per broker and round. ``--print-partition``
prints ``<partition>`` (``<broker>-<partition>`` when several brokers are listed). An
offset outside the log restarts from the earliest offset, with a warning.

With ``--zookeeper HOST:PORT[,..][/chroot]`` (``zk.connect``): consumes as a member of
the consumer group ``--group`` (default: a new ``console-consumer-<n>``, removed from
ZooKeeper again on exit, as 0.7 did) through the ZooKeeper consumer connector, with
one stream over the topic, or over every topic a ``--whitelist``/``--blacklist``
regular expression takes (now and later). The group's partitions are shared with its
other members; each starts at the group's committed offset, or without one at the
latest offset (the earliest with ``--from-beginning``: ``autooffset.reset``).
``--print-partition`` prints ``<broker>-<partition>``. On exit -- ``--max-messages``,
``--timeout-ms``, SIGINT or SIGTERM -- the offsets of everything printed are
committed, so a rerun with the same group goes on where this one stopped.

``--strip-envelopes`` prints the payloads inside producers' audit envelopes
(``clients.envelope``; other payloads as they are); ``--print-envelope`` adds
``<created ms> <host>/<client>\\t`` (``-\\t`` for a message without one).

Output: the payload, preceded by the partition and ``\\t`` with
``--print-partition`` and by ``<next offset>\\t`` with ``--print-offset``. Stops
after ``--max-messages``, or once ``--timeout-ms`` passed without a new message.
Exit codes: 0 done (also after SIGINT/SIGTERM with ``--zookeeper``); 1 an error
while reading; 2 bad arguments; 3 no broker could be reached (``--broker-list``) or
no ZooKeeper server answered within ``--zk-timeout-ms`` (``--zookeeper``).
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

from clients.brokers import parse_broker_list
from clients.consumer import SimpleConsumer
from clients.consumer_settings import ConsumerSettings
from clients.envelope import EnvelopeError
from clients.errors import BrokerUnavailableError
from clients.message_stream import ConsumerTimeoutError
from clients.topic_filter import Blacklist, Whitelist
from clients.zk_consumer import ConsumerConnector
from mpbroker.errors import InvalidTopicError, MPBrokerError, OffsetOutOfRangeError
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable, close_client, start_client
from mpbroker.segments.naming import check_topic

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
MAX_IDLE_SLEEP_S = 0.5
PROG = "mpbroker-console-consumer"
ZK_TIMEOUT_MS = 6000  # --zk-timeout-ms: 0.7's zk.connectiontimeout.ms
POLL_MS = 200  # --zookeeper: longest wait on the stream before looking at signals and --timeout-ms
FLUSH_INTERVAL_S = 0.2  # --zookeeper: output is flushed at least this often while messages flow

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="print the messages of a topic, one per line")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--broker-list", help="HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...]")
    source.add_argument("--zookeeper", metavar="ZK",
                        help="consume as a member of a consumer group: HOST:PORT[,HOST:PORT...][/chroot] "
                             "(zk.connect)")
    parser.add_argument("--group", help="--zookeeper: the consumer group (default: a new console-consumer-<n>, "
                                        "removed again on exit)")
    topics = parser.add_mutually_exclusive_group()
    topics.add_argument("--topic")
    topics.add_argument("--whitelist", metavar="REGEX", help="--zookeeper: every topic the regex matches in full")
    topics.add_argument("--blacklist", metavar="REGEX", help="--zookeeper: every topic the regex does not match")
    parser.add_argument("--partition", type=int, help="only this partition (of each broker)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (--zookeeper: where the group has no offset yet)")
    start.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument("--timeout-ms", type=int, help="stop after this long without a new message")
    parser.add_argument("--print-partition", action="store_true")
    parser.add_argument("--print-offset", action="store_true")
    parser.add_argument("--strip-envelopes", action="store_true",
                        help="print payloads without the producers' audit envelopes (others as they are)")
    parser.add_argument("--print-envelope", action="store_true",
                        help="with --strip-envelopes: prefix <created ms> <host>/<client> (- without an envelope)")
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024)
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
        return
    for name in ("partition", "offset"):
        if getattr(args, name) is not None:
            raise ValueError(f"--{name} cannot be used with --zookeeper (the group assigns the partitions)")
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
    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = range(consumer.partition_count(args.topic))
    streams = []
    for partition in partitions:
        log_end = consumer.latest_offset(args.topic, partition)
        if args.offset is not None:
            offset = args.offset
        elif args.from_beginning:
            offset = consumer.earliest_offset(args.topic, partition)
        else:
            offset = log_end
        label = f"{broker.id}-{partition}" if several_brokers else str(partition)
        streams.append(_Stream(label.encode(), partition, offset, args.fetch_size, log_end))
    return streams


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
        for broker in brokers:
            consumer = SimpleConsumer(broker.host, broker.port, fetch_size=args.fetch_size,
                                      audit_envelope=args.strip_envelopes)
            consumers.append(consumer)
            plan.append((consumer, _streams(consumer, broker, args, len(brokers) > 1)))
        if all(stream.log_end == 0 for _, streams in plan for stream in streams):
            print(f"mpbroker-console-consumer: topic {args.topic!r} has no messages yet; waiting",
                  file=sys.stderr)
        return _consume(plan, args, out)
    except BrokerUnavailableError as exc:
        print(f"mpbroker-console-consumer: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (MPBrokerError, EnvelopeError) as exc:
        print(f"mpbroker-console-consumer: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    finally:
        for consumer in consumers:
            consumer.close()


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
                try:
                    message_set.check()
                except OffsetOutOfRangeError:
                    stream.offset = consumer.earliest_offset(args.topic, stream.partition)
                    print(f"mpbroker-console-consumer: offset out of range on partition {stream.partition}; "
                          f"restarting at {stream.offset}", file=sys.stderr)
                    continue
                if not message_set.payloads:
                    if message_set.size:  # a message larger than the fetch size
                        stream.fetch_size *= 2
                    continue
                got_any = True
                envelopes = message_set.envelopes or itertools.repeat(None)
                for payload, next_offset, envelope in zip(message_set.payloads, message_set.next_offsets, envelopes):
                    prefix = b""
                    if args.print_partition:
                        prefix += stream.label + b"\t"
                    if args.print_offset:
                        prefix += b"%d\t" % next_offset
                    if args.print_envelope:
                        prefix += _envelope_label(envelope)
                    out.write(prefix + payload + b"\n")
                    printed += 1
                    if args.max_messages is not None and printed >= args.max_messages:
                        out.flush()
                        return EXIT_OK
                stream.offset = message_set.next_offset
                stream.fetch_size = args.fetch_size
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
        "max.fetch.size": max(args.fetch_size, 64 * 1024 * 1024), "audit.envelope": args.strip_envelopes,
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
            if generated:
                group = _unused_group(args.zookeeper, settings.zk_connectiontimeout_ms)
                settings = _group_settings(args, group)
            connector = ConsumerConnector(settings)
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
            return _consume_group(stream, args, out, stop)
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
                prefix += b"%d\t" % message.next_offset
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


def _unused_group(zk_connect: str, timeout_ms: int) -> str:
    """A generated group name no group in ZooKeeper has (it is removed on exit)."""
    client = start_client(zk_connect, timeout_ms, timeout_ms)
    try:
        while True:
            group = _random_group()
            if client.exists(layout.group_path(group)) is None:
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
