"""``mpbroker-topics``: create, list, describe and delete topics (Kafka 0.8's
``kafka-topics``), in ZooKeeper; ``delete`` also on a broker alone.

    mpbroker-topics --zookeeper HOST:PORT[,..][/chroot] create --topic T --partitions N
        --replication-factor R [--record-batches] [--config KEY=VALUE ...]
    mpbroker-topics --zookeeper ZK list
    mpbroker-topics --zookeeper ZK describe [--topic T] [--under-replicated]
    mpbroker-topics --zookeeper ZK delete --topic T [--timeout-ms MS]
    mpbroker-topics --bootstrap-server HOST:KAFKA_PORT delete --topic T [--timeout-ms MS]

``delete`` removes a topic, replicated or created the 0.7 way, with every partition's
data on every broker (ARCHITECTURE.md, "The path of a topic deletion"): through
ZooKeeper it marks the topic (``/admin/delete_topics/<topic>``) and waits until the
controller removed it from ``/brokers/topics``; through a broker's modern port (a
broker without ZooKeeper) it sends DeleteTopics, as Kafka's ``kafka-topics
--bootstrap-server`` does. Either way it waits at most ``--timeout-ms``: a topic not
gone by then is still being deleted (exit 1).

``create`` places N partitions of R replicas each over the brokers registered now
(leaders round-robin, followers spread: ``mpbroker.registry.replication``) and writes
the assignment (with the settings node) in one transaction; fewer live brokers than R is an error and nothing is
written. With ``--record-batches`` the partitions' logs hold modern record batches (a
topic for the modern Kafka protocol's clients, on ``kafka.port``), on every replica;
without it, 0.7 messages (ARCHITECTURE.md, "Storage"). ``--config KEY=VALUE``
(repeatable) gives the topic its own settings, Kafka's topic-level names
(``retention.ms``, ``segment.bytes``, ``min.insync.replicas``, ...), checked as
CreateTopics checks them (``segments.topic_configs``, the same messages) and written to
``/config/topics/<topic>`` in the transaction that writes the assignment; every broker
mirrors them and applies them to the topic's logs. ``list`` prints the replicated
topics, one a line. ``describe`` prints per partition its leader, leader epoch,
replicas and in-sync replicas (``-`` until the controller has elected a leader);
``--under-replicated`` only the partitions whose ISR is smaller than their replicas;
and the high watermark, which lives in the leader's
memory, not in ZooKeeper: asked of the leader with an OFFSETS request for the latest
offset (what a consumer of a replicated partition sees), ``-`` if it does not answer
within ``HIGH_WATERMARK_TIMEOUT_S``. Topics created the 0.7 way, by a produce, are not
replicated: they are not listed, and describing one says so. The partitions' leaders,
epochs and ISRs are the controller's to write (``mpbroker.registry.replication``);
``describe`` shows ``-`` for a partition no controller has elected a leader for. A
topic with settings of its own has a line ``topic: T<tab>configs: k=v,k=v`` before
its partitions (not with ``--under-replicated``), as DescribeConfigs reports them
with source TOPIC_CONFIG.

Exit codes, as the console tools have them: 0 done; 1 the topic exists already, a
node in ZooKeeper does not parse, a deletion not finished in time; 2 bad arguments, an
invalid or unknown topic, too few brokers for the replication factor, a setting that is
not one or a value it cannot take; 3 no ZooKeeper server (or broker) answered within
``--zk-timeout-ms``. Errors are one line on standard error.
"""

import argparse
import sys
import time

from mpbroker.cli.failure import fail
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import ClientError
from mpbroker.codec.errors import InvalidTopicError, MPBrokerError
from mpbroker.registry import layout, topic_admin, topic_deletion
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.replication import PlacementError
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable, close_client, start_client
from mpbroker.segments import topic_configs

PROG = "mpbroker-topics"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
ZK_TIMEOUT_MS = 10_000
HIGH_WATERMARK_TIMEOUT_S = 2.0
DELETE_TIMEOUT_MS = 30_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="create, list, describe and delete topics")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="the cluster's zk.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="a broker's modern port (kafka.port), for delete on a broker without ZooKeeper")
    parser.add_argument("--zk-timeout-ms", type=int, default=ZK_TIMEOUT_MS,
                        help=f"how long to wait for ZooKeeper (default {ZK_TIMEOUT_MS})")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="create a replicated topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, required=True)
    create.add_argument("--replication-factor", type=int, required=True)
    create.add_argument("--record-batches", action="store_true",
                        help="the logs hold record batches, for modern Kafka clients (default: 0.7 messages)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic-level setting (Kafka's names: retention.ms, segment.bytes, "
                             "min.insync.replicas, ...); repeatable")
    commands.add_parser("list", help="the replicated topics")
    describe = commands.add_parser("describe", help="leader, epoch, replicas, ISR and high watermark per partition")
    describe.add_argument("--topic", help="only this topic")
    describe.add_argument("--under-replicated", action="store_true",
                          help="only partitions whose ISR is smaller than their replicas")
    delete = commands.add_parser("delete", help="delete a topic and all its data, on every broker")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--timeout-ms", type=int, default=DELETE_TIMEOUT_MS,
                        help=f"how long to wait for the deletion to finish (default {DELETE_TIMEOUT_MS})")
    return parser


def _configs(pairs) -> dict:
    """``--config`` values as ``{key: value}``, checked as CreateTopics checks them
    (TopicConfigError: a ValueError, exit 2)."""
    configs = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise topic_configs.TopicConfigError(f"--config {pair!r}: give KEY=VALUE")
        configs[key.strip()] = value.strip()
    return topic_configs.check(configs)


def _configs_line(topic: str, configs: dict) -> str:
    return f"topic: {topic}\tconfigs: " + ",".join(f"{key}={value}" for key, value in sorted(configs.items()))


def _ids(brokers) -> str:
    return ",".join(map(str, brokers))


def _describe_lines(partitions, only_under_replicated: bool, high_watermark=lambda info: None) -> list:
    lines = []
    for info in partitions:
        if only_under_replicated and not info.under_replicated:
            continue
        state = info.state
        leader = "-" if state is None or state.leader < 0 else str(state.leader)
        epoch = "-" if state is None else str(state.leader_epoch)
        isr = "-" if state is None else _ids(state.isr)
        found = high_watermark(info) if leader != "-" else None
        watermark = "-" if found is None else str(found)
        lines.append(f"topic: {info.topic}\tpartition: {info.partition}\tleader: {leader}\tleader_epoch: {epoch}"
                     f"\treplicas: {_ids(info.replicas)}\tisr: {isr}\thigh_watermark: {watermark}")
    return lines


def _high_watermark(client, info):
    """The leader's latest offset for consumers (its high watermark), or None."""
    timeout_ms = int(HIGH_WATERMARK_TIMEOUT_S * 1000)
    try:
        value, _ = client.get(layout.broker_path(info.state.leader))
        broker = layout.parse_broker(info.state.leader, value)
        with SimpleConsumer(broker.host, broker.port, socket_timeout_ms=timeout_ms,
                            connect_timeout_ms=timeout_ms) as consumer:
            return consumer.latest_offset(info.topic, info.partition)
    except (*ZK_ERRORS, LayoutError, ClientError, MPBrokerError, OSError, IndexError):
        return None


def _run(client, args, out) -> int:
    if args.command == "create":
        configs = _configs(args.config)
        assignment = topic_admin.create_topic(client, args.topic, args.partitions, args.replication_factor,
                                              record_batches=args.record_batches, configs=configs)
        print(f"created topic {args.topic!r}: {len(assignment)} partitions, replication factor "
              f"{args.replication_factor}" + (", record batches" if args.record_batches else ""), file=out)
        if configs:
            print("  configs: " + ",".join(f"{key}={value}" for key, value in sorted(configs.items())), file=out)
        for partition, replicas in sorted(assignment.items()):
            print(f"  partition {partition}: replicas {_ids(replicas)}", file=out)
    elif args.command == "delete":
        topic_deletion.mark(client, args.topic)
        deadline = time.monotonic() + args.timeout_ms / 1000
        while not topic_deletion.gone(client, args.topic):
            if time.monotonic() >= deadline:
                return fail(PROG, f"topic {args.topic!r} is marked for deletion and not gone after "
                                  f"{args.timeout_ms} ms (a replica's broker may be down); it goes once it is back",
                            EXIT_FAILED)
            time.sleep(0.1)
        print(f"deleted topic {args.topic!r}", file=out)
    elif args.command == "list":
        for topic in topic_admin.replicated_topics(client):
            print(topic, file=out)
    else:
        topics = [args.topic] if args.topic else topic_admin.replicated_topics(client)
        for topic in topics:
            partitions = topic_admin.describe_topic(client, topic)
            configs = topic_admin.topic_config(client, topic)
            if configs and not args.under_replicated:
                print(_configs_line(topic, configs), file=out)
            for line in _describe_lines(partitions, args.under_replicated,
                                        lambda info: _high_watermark(client, info)):
                print(line, file=out)
    return EXIT_OK


def main(argv=None, stdout=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    out = stdout or sys.stdout
    if args.bootstrap_server is not None:
        if args.command != "delete":
            parser.error(f"{args.command} needs --zookeeper")
        return delete_through_broker(args.bootstrap_server, args.topic, args.timeout_ms, out)
    try:
        client = start_client(args.zookeeper, 30_000, args.zk_timeout_ms, create_chroot=args.command == "create")
    except ZooKeeperUnavailable as exc:
        return fail(PROG, exc, EXIT_UNREACHABLE)
    try:
        return _run(client, args, out)
    except (InvalidTopicError, PlacementError, topic_admin.UnknownTopic, topic_configs.TopicConfigError,
            topic_deletion.UnknownTopic) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except (topic_admin.TopicExists, LayoutError) as exc:
        return fail(PROG, exc, EXIT_FAILED)
    except ZK_ERRORS as exc:
        return fail(PROG, f"ZooKeeper call failed: {exc!r}", EXIT_UNREACHABLE)
    finally:
        close_client(client)


def delete_through_broker(bootstrap: str, topic: str, timeout_ms: int, out) -> int:
    """DeleteTopics to a broker's modern port (a broker alone: the deletion is its own)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=PROG, request_timeout_ms=timeout_ms + 5000)
    except KafkaError as exc:
        return fail(PROG, f"cannot reach {bootstrap}: {exc}", EXIT_UNREACHABLE)
    try:
        answer = admin.delete_topics([topic], timeout_ms=timeout_ms, raise_errors=False)
    except KafkaError as exc:
        return fail(PROG, f"DeleteTopics to {bootstrap} failed: {exc}", EXIT_UNREACHABLE)
    finally:
        admin.close()
    error = answer["topics"][0]["error_code"]
    if error == 0:
        print(f"deleted topic {topic!r}", file=out)
        return EXIT_OK
    if error in (3, 17):  # UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION
        return fail(PROG, f"{'no topic' if error == 3 else 'invalid topic name'} {topic!r}", EXIT_USAGE)
    return fail(PROG, f"topic {topic!r} is not deleted yet (error {error}"
                      f"{', not finished within the timeout' if error == 7 else ''})", EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
