"""``mpbroker-console-consumer``: print a topic's messages, one per line.

    mpbroker-console-consumer --broker-list HOST:PORT[,..] --topic T [--partition P]
        [--from-beginning] [--offset N] [--max-messages N] [--timeout-ms N]
        [--print-partition] [--print-offset]

Reads every partition of the topic on every listed broker (or partition P of each)
from the latest offset, the earliest (``--from-beginning``) or ``--offset N``, with one
MULTIFETCH per broker and round. Output: the payload, preceded by
``<partition>\\t`` with ``--print-partition`` (``<broker>-<partition>`` when several
brokers are listed) and by ``<next offset>\\t`` with ``--print-offset``. Stops after
``--max-messages``, or once ``--timeout-ms`` passed without a new message. An offset
outside the log restarts from the earliest offset, with a warning. Exit codes: 0
done; 1 an error while reading; 2 bad arguments; 3 no broker could be reached.
"""

import argparse
import sys
import time

from clients.brokers import parse_broker_list
from clients.consumer import SimpleConsumer
from clients.errors import BrokerUnavailableError
from mpbroker.errors import InvalidTopicError, MPBrokerError, OffsetOutOfRangeError
from mpbroker.segments.naming import check_topic

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
MAX_IDLE_SLEEP_S = 0.5


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpbroker-console-consumer",
                                     description="print the messages of a topic, one per line")
    parser.add_argument("--broker-list", required=True, help="HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, help="only this partition (of each broker)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument("--timeout-ms", type=int, help="stop after this long without a new message")
    parser.add_argument("--print-partition", action="store_true")
    parser.add_argument("--print-offset", action="store_true")
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024)
    return parser


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
        check_topic(args.topic)
        brokers = parse_broker_list(args.broker_list)
        if args.offset is not None and args.partition is None:
            raise ValueError("--offset needs --partition")
        if args.partition is not None and args.partition < 0:
            raise ValueError("--partition must be >= 0")
        if args.max_messages is not None and args.max_messages < 0:
            raise ValueError("--max-messages must be >= 0")
        if args.timeout_ms is not None and args.timeout_ms < 0:
            raise ValueError("--timeout-ms must be >= 0")
    except (ValueError, InvalidTopicError) as exc:
        print(f"mpbroker-console-consumer: {exc}", file=sys.stderr)
        return EXIT_USAGE
    consumers = []
    try:
        plan = []
        for broker in brokers:
            consumer = SimpleConsumer(broker.host, broker.port, fetch_size=args.fetch_size)
            consumers.append(consumer)
            plan.append((consumer, _streams(consumer, broker, args, len(brokers) > 1)))
        if all(stream.log_end == 0 for _, streams in plan for stream in streams):
            print(f"mpbroker-console-consumer: topic {args.topic!r} has no messages yet; waiting",
                  file=sys.stderr)
        return _consume(plan, args, out)
    except BrokerUnavailableError as exc:
        print(f"mpbroker-console-consumer: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MPBrokerError as exc:
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
                for payload, next_offset in zip(message_set.payloads, message_set.next_offsets):
                    prefix = b""
                    if args.print_partition:
                        prefix += stream.label + b"\t"
                    if args.print_offset:
                        prefix += b"%d\t" % next_offset
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


if __name__ == "__main__":
    sys.exit(main())
