"""``mpbroker-console-producer``: one message per line of standard input.

    mpbroker-console-producer (--broker-list HOST:PORT[,..] | --zookeeper ZK) --topic T
        [--compression gzip|snappy] [--key-separator SEP] [--sync|--async] [--acks append|flush|replicated]
        [--audit [--audit-window-ms N] [--audit-topic T]] [--spread-topic]

``--broker-list`` (alias ``--bootstrap-server``) names the brokers; ``--zookeeper
HOST:PORT[,..][/chroot]`` finds them in ZooKeeper instead (``zk.connect``: the live
brokers and the topic's partitions, followed while the tool runs).

``--audit`` stamps each line with an audit envelope (creation time, host, producer)
and publishes the counts per window to the audit topic (``mpbroker.clients.producer.auditor``).

``--acks none`` (the default) is 0.7's fire-and-forget: the broker answers nothing,
so a line it drops (too large, its worker restarting, the broker stopping or crashing
with the batch unread) is lost without an error and the exit code is still 0.
``--acks append`` waits for each batch to be appended (and retries), ``--acks flush``
for it to be on disk, ``--acks replicated`` (Kafka's request.required.acks=-1) until
every in-sync replica of its partition has it. With ``--zookeeper`` a replicated topic's
lines go to each partition's current leader (followed when it changes). Consumers of an
unreplicated topic see messages only once the broker flushed them (``log.flush.interval``
messages or ``log.default.flush.interval.ms``, 3 s by default): ``--acks flush`` makes
them fetchable when the tool exits; those of a replicated topic see what every in-sync
replica has.

With ``--key-separator`` the text before the first separator is the message's key (it
picks the partition and is not part of the message); a line without the separator
stops the run. Exit codes: 0 every line delivered (or queued and then delivered by
``close``); 1 the broker refused or lost messages; 2 bad arguments or input; 3 no
broker (or no ZooKeeper) could be reached.
"""

import argparse
import logging
import sys

from mpbroker.cli.failure import fail
from mpbroker.clients.core.errors import BrokerUnavailableError, ClientError
from mpbroker.clients.producer.producer import Producer
from mpbroker.codec.errors import InvalidTopicError, MPBrokerError
from mpbroker.codec.topic_names import check_topic

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpbroker-console-producer",
                                     description="send each line of standard input as a message")
    brokers = parser.add_mutually_exclusive_group(required=True)
    brokers.add_argument("--broker-list", "--bootstrap-server", dest="broker_list", metavar="BROKERS",
                         help="send to these brokers: HOST:PORT[,HOST:PORT...] or ID:HOST:PORT[,...] "
                              "(--bootstrap-server is the same)")
    brokers.add_argument("--zookeeper", metavar="ZK",
                         help="find the brokers in ZooKeeper: HOST:PORT[,HOST:PORT...][/chroot] (zk.connect)")
    parser.add_argument("--topic", required=True, help="the topic to send to")
    parser.add_argument("--compression", choices=("none", "gzip", "snappy"), default="none",
                        help="compress each batch (compression.codec; default none)")
    parser.add_argument("--key-separator", help="text before it is the key, e.g. a TAB: $'\\t'")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sync", dest="producer_type", action="store_const", const="sync",
                      help="send each line before reading the next")
    mode.add_argument("--async", dest="producer_type", action="store_const", const="async",
                      help="batch lines in the background (the default)")
    parser.add_argument("--acks", choices=("none", "append", "flush", "replicated"), default="none",
                        help="none (the default, 0.7's fire-and-forget): the broker answers nothing, so a line "
                             "it drops -- too large, its partition's worker restarting, the broker stopping or "
                             "crashing with the batch unread -- is lost without an error and the exit code is 0; "
                             "append: wait until the broker appended each batch to its log (retried on failure; "
                             "lost only by a power cut before the broker's next flush); flush: wait until it is on "
                             "disk (and fetchable at once); replicated: wait until every in-sync replica of the "
                             "partition has it (request.required.acks=-1)")
    parser.add_argument("--batch-size", type=int, default=200, help="async: messages per batch")
    parser.add_argument("--queue-time-ms", type=int, default=1000, help="async: longest wait for a batch")
    parser.add_argument("--audit", action="store_true",
                        help="stamp each message with an audit envelope and publish audit events (audit.envelope)")
    parser.add_argument("--audit-window-ms", type=int, default=60000, help="--audit: audit.window.ms (60000)")
    parser.add_argument("--audit-topic", default="_audit", help="--audit: audit.topic (_audit)")
    parser.add_argument("--spread-topic", action="store_true",
                        help="--zookeeper: create the topic on every live broker before the first line, so that "
                             "it spreads over all their partitions (spread.topics)")
    parser.set_defaults(producer_type="async")
    return parser


def _lines(stream):
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def main(argv=None, stdin=None) -> int:
    args = _parser().parse_args(argv)
    if args.zookeeper:  # kazoo's reconnection notices are not for this tool's stderr; ours say what matters
        logging.getLogger("kazoo").setLevel(logging.ERROR)
    stdin = stdin or sys.stdin.buffer
    try:
        check_topic(args.topic)
        discovery = {"zk.connect": args.zookeeper} if args.zookeeper else {"broker.list": args.broker_list}
        producer = Producer({
            **discovery, "producer.type": args.producer_type, "acks": args.acks,
            "compression.codec": args.compression, "batch.size": args.batch_size,
            "queue.time": args.queue_time_ms, "queue.enqueueTimeout.ms": -1,
            "audit.envelope": args.audit, "audit.window.ms": args.audit_window_ms, "audit.topic": args.audit_topic,
            "spread.topics": args.spread_topic,
        })
    except (ValueError, InvalidTopicError) as exc:
        return fail("mpbroker-console-producer", exc, EXIT_USAGE)
    except BrokerUnavailableError as exc:  # --zookeeper: ZooKeeper did not answer
        return fail("mpbroker-console-producer", exc, EXIT_UNREACHABLE)
    separator = args.key_separator.encode() if args.key_separator else None
    code = EXIT_OK
    try:
        producer.partitions_for(args.topic)  # fail fast when no broker answers
        for number, line in enumerate(_lines(stdin), 1):
            key = None
            if separator is not None:
                key, found, line = line.partition(separator)
                if not found:
                    print(f"mpbroker-console-producer: line {number} has no key separator "
                          f"{args.key_separator!r}; stopping", file=sys.stderr)
                    code = EXIT_USAGE
                    break
            producer.send(args.topic, line, key=key)
    except BrokerUnavailableError as exc:
        code = fail("mpbroker-console-producer", exc, EXIT_UNREACHABLE)
    except (ClientError, MPBrokerError) as exc:
        code = fail("mpbroker-console-producer", exc, EXIT_FAILED)
    finally:
        producer.close()
    if code == EXIT_OK and producer.stats.messages_failed:
        print(f"mpbroker-console-producer: {producer.stats.messages_failed} messages could not be delivered",
              file=sys.stderr)
        code = EXIT_FAILED
    return code


if __name__ == "__main__":
    sys.exit(main())
