"""Mirror throughput between two clusters on this machine.

    python -m bench.mirror_bench [--messages N] [--streams S ...] [--batch-size B]

Two clusters, each a real ZooKeeper and a 2-worker broker with 4 partitions. N keyed
200-byte messages are produced to the source first; then ``mpbroker.clients.mirror.mirror_maker.Mirror`` is
started, and the clock runs from its start until the target's log ends add up to the
source's (joining the group and the target's topic registration are included). One
run per stream count; writes ``bench/results/mirror.{json,md}``.
"""

import argparse
import logging
import os
import tempfile
import time

from bench.common import print_table, write_results
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.groups.topic_filter import Whitelist
from mpbroker.clients.mirror.mirror_maker import Mirror, MirrorConfig
from mpbroker.testing.local_broker import LocalBroker
from mpbroker.testing.local_zookeeper import ZooKeeperServer

TOPIC = "bench"
PARTITIONS = 4
BROKER = dict(num_workers=2, num_partitions=PARTITIONS, log_flush_interval=10000, log_default_flush_interval_ms=20,
              log_default_flush_scheduler_interval_ms=20)


def log_ends(port: int) -> int:
    with SimpleConsumer("127.0.0.1", port) as consumer:
        return sum(consumer.latest_offset(TOPIC, partition) for partition in range(PARTITIONS))


def fill_source(zk_connect: str, messages: int) -> None:
    payload = os.urandom(190)
    with Producer(zk_connect=zk_connect, acks="append", producer_type="async", batch_size=500, queue_time=50,
                  queue_enqueueTimeout_ms=-1) as producer:
        for number in range(messages):
            producer.send(TOPIC, payload + b"%010d" % number, key=b"%d" % number)


def mirror_once(directory: str, messages: int, streams: int, batch_size: int) -> dict:
    with ZooKeeperServer(os.path.join(directory, "zk-a")) as zk_a, ZooKeeperServer(os.path.join(directory, "zk-b")) as zk_b:
        source, target = zk_a.connect_string("/a"), zk_b.connect_string("/b")
        with LocalBroker(os.path.join(directory, "a"), enable_zookeeper="true", zk_connect=source, brokerid=1,
                         **BROKER) as broker_a, \
                LocalBroker(os.path.join(directory, "b"), enable_zookeeper="true", zk_connect=target, brokerid=1,
                            **BROKER) as broker_b:
            fill_source(source, messages)
            total = log_ends(broker_a.port)
            started = time.perf_counter()
            mirror = Mirror(MirrorConfig(sources=[source], target=target, topic_filter=Whitelist(TOPIC),
                                         num_streams=streams, batch_size=batch_size, report_interval_s=60)).start()
            try:
                while log_ends(broker_b.port) < total:
                    time.sleep(0.02)
                seconds = time.perf_counter() - started
            finally:
                mirror.stop()
    return {"streams": streams, "batch_size": batch_size, "messages": messages, "seconds": round(seconds, 2),
            "messages_per_s": round(messages / seconds), "mb_per_s": round(total / seconds / 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs = []
    for streams in args.streams:
        with tempfile.TemporaryDirectory(prefix="mpbroker-mirror-bench-") as directory:
            runs.append(mirror_once(directory, args.messages, streams, args.batch_size))
    table = print_table(
        f"mpbroker-mirror between two clusters on this machine ({args.messages:,} keyed 200-byte messages)",
        ["streams", "batch size", "seconds", "messages/s", "MB/s of log"],
        [[r["streams"], r["batch_size"], r["seconds"], f"{r['messages_per_s']:,}", r["mb_per_s"]] for r in runs])
    write_results("mirror", table, {"runs": runs})


if __name__ == "__main__":
    main()
