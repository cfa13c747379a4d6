"""Apache Kafka 4.4 as a bench peer of mpbroker, with the settings that matter for a fair
comparison set the same on both (and printed by the benches that use them).

    python -m bench.kafka_peer [--nodes 1|3]   # start Kafka with the bench settings, print them, stop

The Kafka side is ``mpbroker.testing.apache_kafka`` (jars fetched with mvn into
~/.cache/mpbroker-apache-kafka the first time): ``kafka_node`` is one KRaft node (broker and
controller in one JVM), ``kafka_cluster`` three of them, each its own JVM, log dir and
ports, a static three-voter quorum. The heap is set explicitly, as Kafka's own start script
does: -Xms1g -Xmx1g. ``mpbroker_node`` is mpbroker (``BenchBroker``, a process tree:
supervisor, acceptor and workers) with the same settings; ``mpbroker_cluster`` three of
them and the real ZooKeeper they register in (``mpbroker.testing.local_cluster``: Debian's
``zookeeper``, one JVM). ZooKeeper is part of mpbroker's cluster and of its cost (CPU,
memory, start-up), as Kafka's KRaft controllers are inside its three JVMs.

The shared settings (``FAIR``):

- flush policy: the page cache, no fsync while a run lasts, on both. That is Kafka's
  default (``log.flush.interval.messages`` Long.MAX_VALUE, no ``log.flush.interval.ms``:
  durability from replication, the OS writes back). mpbroker's default fsyncs every 500
  messages or 3 s, so it is set to the same here (``log.flush.interval`` and
  ``log.default.flush.interval.ms`` to 2**31-1: no flush in a run).
- segment size 1 GiB (both brokers' default), one partition a topic, replication factor 1
  and ``min.insync.replicas`` 1 on one node; 3 and 2 on three (``default.replication.factor``
  and ``min.insync.replicas``, the same keys on both).

Bench-only helpers beside them: the resident memory of a process tree (``tree_rss_bytes``,
from /proc: mpbroker is several processes) and the start-up time of a broker (from its
process start until its Kafka listener answers ApiVersions and Metadata).
"""

import argparse
import sys
import tempfile
import threading
import time

from bench.broker_process import BenchBroker
from mpbroker.testing import apache_kafka
from mpbroker.testing.local_cluster import LocalCluster
from mpbroker.testing.process_cpu import process_tree

HEAP = "1g"  # -Xmx and -Xms, as kafka-server-start.sh's default
NO_FLUSH = 2**31 - 1
SEGMENT_BYTES = 1 << 30


def fair(nodes: int = 1) -> dict:
    """The settings both brokers share, in words (what the benches print)."""
    return {"flush": "page cache, no fsync during a run (Kafka's default; mpbroker's set so)",
            "segment_bytes": SEGMENT_BYTES, "partitions": 1, "replication_factor": 1 if nodes == 1 else 3,
            "min_insync_replicas": 1 if nodes == 1 else 2, "kafka_heap": f"-Xms{HEAP} -Xmx{HEAP}"}


def kafka_properties(nodes: int = 1) -> dict:
    settings = fair(nodes)
    return {"log_flush_interval_messages": 9223372036854775807, "log_segment_bytes": SEGMENT_BYTES,
            "num_partitions": settings["partitions"], "default_replication_factor": settings["replication_factor"],
            "min_insync_replicas": settings["min_insync_replicas"]}


def mpbroker_properties(nodes: int = 1) -> dict:
    settings = fair(nodes)
    return {"log_flush_interval": NO_FLUSH, "log_default_flush_interval_ms": NO_FLUSH, "log_file_size": SEGMENT_BYTES,
            "num_partitions": settings["partitions"], "default_replication_factor": settings["replication_factor"],
            "min_insync_replicas": settings["min_insync_replicas"]}


def kafka_node(directory) -> apache_kafka.ApacheKafka:
    return apache_kafka.ApacheKafka(directory, heap=HEAP, initial_heap=HEAP, **kafka_properties(1))


def kafka_cluster(directory, nodes: int = 3) -> apache_kafka.ApacheKafkaCluster:
    return apache_kafka.ApacheKafkaCluster(directory, nodes, heap=HEAP, initial_heap=HEAP, **kafka_properties(nodes))


def mpbroker_node(base_dir=None) -> BenchBroker:
    """mpbroker on a Kafka port chosen now (so start-up can be timed from outside)."""
    return BenchBroker(base_dir, kafka_port=apache_kafka.free_port(), **mpbroker_properties(1))


def mpbroker_cluster(directory, nodes: int = 3) -> LocalCluster:
    """ZooKeeper and ``nodes`` mpbroker brokers in ``directory`` with the same settings as
    ``kafka_cluster``; each broker's Kafka port chosen now (start-up is timed from outside)."""
    return LocalCluster(directory, nodes, **mpbroker_properties(nodes))


def tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and every live descendant (VmRSS from /proc, summed)."""
    return _tree_kib_field(root, "status", "VmRSS:")


def tree_pss_bytes(root: int) -> int:
    """Proportional set size of ``root`` and every live descendant (``Pss`` of
    /proc/PID/smaps_rollup, summed): each shared page counted once over the processes
    sharing it. mpbroker's workers are forked from its supervisor and share its pages
    (copy on write), which summed RSS counts once per process."""
    return _tree_kib_field(root, "smaps_rollup", "Pss:")


def _tree_kib_field(root: int, name: str, field: str) -> int:
    """The ``field`` line (in kB) of /proc/PID/``name``, summed over ``root``'s tree, in bytes."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:  # ended meanwhile
            pass
    return total


def timed_start(start, host: str, port: int, brokers: int = 1, timeout: float = 180.0) -> float:
    """Run ``start()`` (it starts a broker and returns once it is ready) on a thread and
    return the seconds from its call until ``host:port`` answers ApiVersions and Metadata
    (listing ``brokers``), polled every 5 ms here: the start-up time as a client sees it."""
    failure = []

    def run():
        try:
            start()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            failure.append(error)

    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not apache_kafka.answers(host, port, brokers):
        if failure or time.monotonic() > deadline:
            thread.join(timeout)
            raise RuntimeError(f"no answer on {host}:{port}: {failure[0] if failure else 'timeout'}")
        time.sleep(0.005)
    seconds = time.perf_counter() - started
    thread.join(timeout)
    if failure:
        raise failure[0]
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    args = parser.parse_args(argv)
    if not apache_kafka.available():
        print(f"Apache Kafka cannot run here: {apache_kafka.missing()}", file=sys.stderr)
        return 1
    print(f"fair settings: {fair(args.nodes)}")
    with tempfile.TemporaryDirectory(prefix="kafka-peer-") as directory:
        peer = kafka_node(directory) if args.nodes == 1 else kafka_cluster(directory, args.nodes)
        started = time.perf_counter()
        with peer:
            processes = [peer.process] if args.nodes == 1 else peer.processes
            rss = sum(tree_rss_bytes(process.pid) for process in processes)
            print(f"Apache Kafka {peer.version}, {args.nodes} node(s) on {peer.bootstrap}: ready in "
                  f"{time.perf_counter() - started:.1f} s (format included), {rss / 2**20:.0f} MiB resident")
    left = [process.pid for process in processes if process.poll() is None]
    print("stopped" + (f", still running: {left}" if left else ", no process left"))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
