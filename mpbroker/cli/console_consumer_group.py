"""``mpbroker-console-consumer --zookeeper``: consuming as a member of a consumer group.

This module owns that mode: the connector's settings from the options, checking that
``--topic`` is registered (unless ``--wait-for-topic``), the generated group
``console-consumer-<n>`` (picked unused, removed from ZooKeeper on exit), the reading
loop over the one stream (``--max-messages``, ``--timeout-ms``, SIGINT and SIGTERM end
it; the connector's shutdown commits what was printed) and the mapping of its errors to
exit codes.
"""

import logging
import random
import signal
import sys
import threading
import time

from kazoo.exceptions import NoNodeError

from mpbroker.cli.console_consumer_args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    PROG,
    ZK_TIMEOUT_MS,
)
from mpbroker.cli.console_consumer_output import message_prefix
from mpbroker.cli.failure import fail
from mpbroker.clients.core.envelope import EnvelopeError
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.core.zk_registry import read_topics
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
from mpbroker.clients.groups.settings import ConsumerSettings
from mpbroker.clients.groups.topic_filter import Blacklist, Whitelist
from mpbroker.codec.errors import MPBrokerError
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable, close_client, start_client

POLL_MS = 200  # longest wait on the stream before looking at signals and --timeout-ms
FLUSH_INTERVAL_S = 0.2  # output is flushed at least this often while messages flow

log = logging.getLogger("mpbroker.cli.console_consumer")  # the logger its warnings were named by before


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


def consume_as_group(args, out) -> int:
    """Print the messages of the group's partitions (``--zookeeper``); the exit code."""
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
        return fail(PROG, exc, EXIT_USAGE)
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
            return fail(PROG, exc, EXIT_USAGE)
        except ZooKeeperUnavailable as exc:
            return fail(PROG, f"ZooKeeper unreachable: {exc}", EXIT_UNREACHABLE)
        except ZK_ERRORS as exc:
            return fail(PROG, f"ZooKeeper failed: {exc!r}", EXIT_UNREACHABLE)
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
            return fail(PROG, f"ZooKeeper failed: {exc!r}", EXIT_UNREACHABLE)
        except (MPBrokerError, EnvelopeError) as exc:
            return fail(PROG, exc, EXIT_FAILED)
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
            if message.broker_id == REPLICATED:  # a replicated topic's partition: its number alone
                partition = b"%d" % message.partition
            else:
                partition = b"%d-%d" % (message.broker_id, message.partition)
            prefix = message_prefix(args, partition, message.offset, message.next_offset, message.envelope,
                                    message.key, message.headers, message.timestamp)
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
