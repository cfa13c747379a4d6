"""``mpbroker-mirror``: mirror topics from one or more source clusters into a target.

    mpbroker-mirror --source-zookeeper ZK_A [--source-zookeeper ZK_C ...] --target-zookeeper ZK_B
        (--whitelist REGEX | --blacklist REGEX) [--num-streams N] [--group G]
        [--acks append|flush|replicated] [--batch-size N] [--linger-ms N]
        [--metrics-port P [--metrics-host H]] [--report-interval-s S]
        [--consumer-property KEY=VALUE ...] [--producer-property KEY=VALUE ...]

Runs ``mpbroker.clients.mirror.mirror_maker.Mirror`` until SIGTERM or SIGINT, then delivers what it holds,
commits and exits. Each source's consumer group (``--group``, default
``mpbroker-mirror``) keeps the offsets on that source: a restarted mirror, or a second
mirror process with the same group sharing the partitions, goes on from them.
``--consumer-property`` and ``--producer-property`` pass further settings (0.7 names)
to the source connectors and the target producer.

Every ``--report-interval-s`` (10) a line on stderr: messages and bytes mirrored, their
rates, partitions owned, lag in bytes. ``--metrics-port`` serves the Prometheus
metrics of ``mpbroker.clients.mirror.metrics`` at ``http://H:P/metrics``.

Exit codes: 0 stopped by a signal after delivering everything it held; 1 a stream
failed, or batches were left undelivered at the stop (they are mirrored again next
time); 2 bad arguments; 3 a ZooKeeper did not answer at start.
"""

import argparse
import logging
import signal
import sys
import threading

from mpbroker.cli.failure import fail
from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.groups.topic_filter import Blacklist, Whitelist
from mpbroker.clients.mirror.metrics import MirrorMetrics
from mpbroker.clients.mirror.mirror_maker import DEFAULT_GROUP, Mirror, MirrorConfig
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PROG = "mpbroker-mirror"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="mirror topics from source clusters into a target")
    parser.add_argument("--source-zookeeper", metavar="ZK", action="append", required=True,
                        help="zk.connect of a source cluster (repeat for several)")
    parser.add_argument("--target-zookeeper", metavar="ZK", required=True, help="zk.connect of the target cluster")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--whitelist", metavar="REGEX", help="mirror the topics the regex matches in full")
    topics.add_argument("--blacklist", metavar="REGEX", help="mirror the topics the regex does not match")
    parser.add_argument("--num-streams", type=int, default=1, help="streams (threads) per source (default 1)")
    parser.add_argument("--group", default=DEFAULT_GROUP, help=f"consumer group on the sources ({DEFAULT_GROUP})")
    parser.add_argument("--acks", choices=("append", "flush", "replicated"), default="append",
                        help="a message is mirrored once the target appended it (default), flushed it, or every "
                             "in-sync replica of its replicated target partition has it")
    parser.add_argument("--batch-size", type=int, default=500, help="messages per delivery (500)")
    parser.add_argument("--linger-ms", type=int, default=100, help="longest wait for a batch to fill (100)")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address of the metrics endpoint (0.0.0.0)")
    parser.add_argument("--report-interval-s", type=float, default=10.0, help="seconds between log lines (10)")
    parser.add_argument("--stop-timeout-s", type=float, default=30.0,
                        help="on a signal, the longest wait for batches in flight (30)")
    parser.add_argument("--consumer-property", metavar="KEY=VALUE", action="append", default=[],
                        help="a further source consumer setting, e.g. autocommit.interval.ms=5000")
    parser.add_argument("--producer-property", metavar="KEY=VALUE", action="append", default=[],
                        help="a further target producer setting, e.g. compression.codec=snappy")
    return parser


def _properties(pairs: list, option: str) -> dict:
    properties = {}
    for pair in pairs:
        key, found, value = pair.partition("=")
        if not found or not key.strip():
            raise ValueError(f"{option} {pair!r} is not KEY=VALUE")
        properties[key.strip()] = value.strip()
    return properties


def config_from(args) -> MirrorConfig:
    topic_filter = Whitelist(args.whitelist) if args.whitelist is not None else Blacklist(args.blacklist)
    if args.report_interval_s <= 0 or args.stop_timeout_s < 0:
        raise ValueError("--report-interval-s must be positive and --stop-timeout-s not negative")
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        raise ValueError("--metrics-port must be 0-65535")
    config = MirrorConfig(
        sources=args.source_zookeeper, target=args.target_zookeeper, topic_filter=topic_filter,
        num_streams=args.num_streams, group=args.group, acks=args.acks, batch_size=args.batch_size,
        linger_ms=args.linger_ms, report_interval_s=args.report_interval_s, stop_timeout_s=args.stop_timeout_s,
        consumer_properties=_properties(args.consumer_property, "--consumer-property"),
        producer_properties=_properties(args.producer_property, "--producer-property"))
    config.check()
    return config


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = config_from(args)
    except ValueError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {PROG}: %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    metrics = MirrorMetrics()
    try:
        if args.metrics_port is not None:
            port = metrics.serve(args.metrics_port, args.metrics_host)
            logging.getLogger(PROG).info("serving metrics on http://%s:%d/metrics", args.metrics_host, port)
        mirror = Mirror(config, metrics).start()
    except ValueError as exc:  # a setting in --consumer-property / --producer-property
        print(f"{PROG}: {exc}", file=sys.stderr)
        metrics.close()
        return EXIT_USAGE
    except (ZooKeeperUnavailable, BrokerUnavailableError, *ZK_ERRORS) as exc:
        print(f"{PROG}: ZooKeeper unreachable: {exc}", file=sys.stderr)
        metrics.close()
        return EXIT_UNREACHABLE
    except OSError as exc:  # the metrics port is taken
        print(f"{PROG}: {exc}", file=sys.stderr)
        metrics.close()
        return EXIT_FAILED
    while not stop.wait(0.5) and not mirror.failed.is_set():
        pass
    delivered = mirror.stop()
    metrics.close()
    if mirror.failed.is_set():
        print(f"{PROG}: a stream failed: {mirror.failure!r}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if delivered else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
