"""``mpbroker-console-consumer --broker-list``: reading partitions straight from the brokers.

This module owns that mode: where each partition starts (the latest offset, the earliest
with ``--from-beginning``, a checked ``--offset``, or ``--offset-by-time``), the refusal
of a topic no listed broker has a log of (unless ``--wait-for-topic``), the reading loop
(one MULTIFETCH per broker and round, a larger fetch size for a message larger than it,
a restart at the earliest offset when retention deleted the segment being read) and the
mapping of its errors to exit codes.
"""

import itertools
import sys
import time

from mpbroker.cli.console_consumer_args import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, PROG
from mpbroker.cli.console_consumer_output import message_prefix
from mpbroker.cli.failure import fail
from mpbroker.clients.consumer.offset_times import start_offset_for_time
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.envelope import EnvelopeError
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError, NotAMessageBoundaryError
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.codec.errors import MessageSizeTooLargeError, MPBrokerError, OffsetOutOfRangeError

MAX_IDLE_SLEEP_S = 0.5


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


def consume_from_brokers(args, brokers, out) -> int:
    """Print the messages of ``args.topic`` on ``brokers`` (``--broker-list``); the exit code."""
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
            return fail(PROG, exc, EXIT_USAGE)
        return _consume(plan, args, out)
    except BrokerUnavailableError as exc:
        return fail(PROG, exc, EXIT_UNREACHABLE)
    except NotAMessageBoundaryError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except MessageSizeTooLargeError as exc:
        return fail(PROG, f"{exc}; a larger --max-fetch-size reads it", EXIT_FAILED)
    except (MPBrokerError, EnvelopeError, ClientError) as exc:  # ClientError: e.g. an unknown error code
        return fail(PROG, exc, EXIT_FAILED)
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
                keys = message_set.keys or itertools.repeat(None)
                headers = message_set.headers or itertools.repeat(())
                timestamps = message_set.timestamps or itertools.repeat(None)
                for payload, start, next_offset, envelope, key, header, timestamp in zip(
                        message_set.payloads, starts, message_set.next_offsets, envelopes, keys, headers, timestamps):
                    out.write(message_prefix(args, stream.label, start, next_offset, envelope, key, header, timestamp)
                              + payload + b"\n")
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
