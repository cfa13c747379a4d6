"""mpbroker beside Apache Kafka 4.4 on this machine, the same client against both, in one run.

    python -m bench.kafka_compare [--runs 5] [--messages N] [--quick] [--dir D] [--results-dir D]
                                  [--no-kafka-tools] [--no-cluster] [--no-one-node]
                                  [--no-latency] [--latency-seconds S]

One node of each (``bench.kafka_peer``: the same flush policy, segment size, partitions,
replication factor and ``min.insync.replicas``, printed; Kafka's heap -Xms1g -Xmx1g).
A run starts a fresh broker, measures, and stops it; runs are INTERLEAVED (mpbroker, Kafka,
mpbroker, Kafka, ...) and only one broker is up at a time, so the machine's noise (2 shared
cores here) falls on both alike: that is what makes the ratio fair. The table gives the
medians of ``--runs`` runs of each.

Rows (one run of a broker, in this order):

- ``startup_s``: from the broker's process start until its Kafka listener answers
  ApiVersions and a Metadata that lists it (polled every 5 ms; Kafka's ``kafka-storage
  format`` is done before, not timed). mpbroker's is its whole process tree coming up.
- ``rss_rest_mib``: resident memory of the broker's whole process tree (VmRSS from /proc,
  summed: mpbroker is a supervisor, an acceptor and workers; Kafka one JVM), once it has
  answered and rested ``REST_S`` seconds.
- ``pss_rest_mib``: the same tree's proportional set size (``Pss`` of smaps_rollup, summed):
  pages shared between processes counted once. mpbroker's workers are forked from its
  supervisor and share its pages, which summed RSS counts once per process; for Kafka's one
  JVM the two are about equal. The fair figure of a process tree's memory.
- warm-up, not measured: ``--warmup`` messages (default 100,000) produced with acks=1 and
  consumed, on both: a fresh JVM runs interpreted until its JIT has compiled the hot paths,
  which is not how a broker in service runs (mpbroker, CPython, has no such phase).
- ``produce_acks0`` / ``produce_acks1`` / ``produce_acksall``: librdkafka's
  ``rdkafka_performance -P`` (``bench.rdkafka_perf``), N messages of 200 bytes to partition
  0 of a topic created beforehand (a fresh one per row), ``linger.ms`` 5, ``-a 0/1/-1``;
  msg/s by the program's own clock (first produce() to the last delivery report; with
  acks=0 a delivery report comes as soon as the request is written, so it measures how fast
  the broker takes bytes off the socket).
- ``consume``: ``rdkafka_performance -C`` reading the acks=1 topic's N messages from the
  beginning: msg/s by the program's clock (first message to the N-th).
- ``tools_produce_acks0``, ``tools_produce_acks1``, ``tools_produce_acksall``,
  ``tools_produce_p99_ms``, ``tools_consume`` (``--no-kafka-tools`` leaves them out): Kafka's
  own Java tools (``bench.kafka_tools_perf``), the producer with acks=0, 1 and all and
  ``linger.ms`` 5 writing N messages of 200 bytes to a fresh topic each as fast as it goes
  (its rate, and at acks=1 its p99 latency at that rate: a queueing figure, not a latency at
  a set load), then the consumer reading the acks=1 topic in a fresh group (its rate after
  the join).
- ``latency_p50_1k``, ``latency_p99_1k``, ``latency_p999_1k``, ``latency_p50_10k``,
  ``latency_p99_10k``, ``latency_p999_10k`` (``--no-latency`` leaves them out), after the
  rows above: end-to-end latency in ms at 1,000 and 10,000 msg/s (``bench.kafka_latency``):
  a confluent-kafka producer process sending 200-byte values stamped with CLOCK_MONOTONIC
  at that rate (acks=1, ``linger.ms`` 0: a latency measure) to a fresh topic, a consumer
  process at librdkafka's defaults (``fetch.wait.max.ms`` 500, ``fetch.min.bytes`` 1)
  taking receipt minus stamp; ``--latency-seconds`` measured a rate (default 10, ``--quick``
  1), after a warm-up and before a cool-down left out (2 s and 1 s, less for short runs),
  all after one unmeasured run of 3 s (``--quick`` 0.5) at 10,000 msg/s on a topic of its own
  (Kafka's first seconds on this path are slow, its JIT not done with it).
  Every message sent must arrive.
- ``cpu_produce_acks1``, ``cpu_produce_acksall``, ``cpu_consume``: the CPU seconds (user +
  system, from /proc) the broker's whole process tree spent over that rdkafka_performance
  row, per million messages: less moved by other work on the machine than a rate is.
- ``rss_load_mib``, ``pss_load_mib``: the largest resident memory and proportional set size
  of the tree sampled every 100 ms during the produce and consume rows.
- ``disk_bytes_per_message``: allocated bytes (``du``) of the acks=1 and acks=all topics'
  partition directories (log segments and indexes) after the produce rows, over their 2N
  messages (acks=0's topic is left out: nothing says its last bytes have landed).

Three nodes of each (``--cluster``, on by default; ``--no-cluster`` leaves them out, and
``--no-one-node`` everything else: the three-node rows alone), a section of its own after
the one-node runs (``bench.kafka_cluster_compare``: its own interleaved runs, mpbroker
cluster, Kafka cluster, ..., one cluster up at a time, each a fresh ZooKeeper and three
mpbroker brokers, or three KRaft JVMs, with replication factor 3 and
``min.insync.replicas`` 2 on both):

- ``rf3_produce_acksall``: ``rdkafka_performance -P`` with acks=all (``-a -1``), N messages
  of 200 B, ``linger.ms`` 5, to a fresh RF 3 topic made with CreateTopics and waited for
  until its ISR holds all three (after ``--warmup`` messages to another RF 3 topic): msg/s.
- ``rf3_consume``: ``rdkafka_performance -C`` of that topic: msg/s.
- ``cpu_rf3_produce_acksall``: CPU seconds per million messages of every process of the
  cluster over that produce: mpbroker's ZooKeeper counted with its brokers (Kafka's KRaft
  controllers are inside its JVMs); the notes give it by role (the leader's acceptor and
  workers, the followers', ZooKeeper; Kafka's leader JVM and followers' JVMs).
- ``rf3_startup_s``: from the cluster's start until the first node's Metadata lists three
  brokers (mpbroker's: ZooKeeper's start included; Kafka's storage format not).

Ratio column: always "how many times better mpbroker is": mpbroker/Kafka for throughput
(higher is better), Kafka/mpbroker for memory, start-up time and disk (lower is better).
Above 1: mpbroker does better. Where ``rdkafka_performance`` cannot be built (or Kafka
cannot run) the rows say why and are left out. ``bench/results/kafka_compare.{md,json}``
hold every run, the settings, the versions and the machine.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from bench import kafka_cluster_compare, kafka_latency, kafka_tools_perf, rdkafka_perf
from bench.common import RESULTS_DIR, print_table, write_results
from bench.disk_usage import allocated_bytes
from bench.interrupts import stop_on_signals
from bench.kafka_peer import fair, kafka_node, mpbroker_node, timed_start, tree_pss_bytes, tree_rss_bytes
from bench.modern_bench import create_topic, git_commit, java_version
from mpbroker.testing import apache_kafka
from mpbroker.testing.process_cpu import tree_cpu_seconds

MESSAGE_BYTES = 200
LINGER_MS = 5
ACKS = {"produce_acks0": 0, "produce_acks1": 1, "produce_acksall": -1}
TOOLS_ACKS = {"tools_produce_acks0": 0, "tools_produce_acks1": 1, "tools_produce_acksall": -1}
SIZES = {"default": {"messages": 1_000_000, "runs": 5, "rest": 3.0, "warmup": 100_000},
         "quick": {"messages": 5_000, "runs": 1, "rest": 0.2, "warmup": 1_000}}
# row -> (label, unit, higher is better)
ROWS = {
    "produce_acks0": ("produce, rdkafka_performance, acks=0", "msg/s", True),
    "produce_acks1": ("produce, rdkafka_performance, acks=1", "msg/s", True),
    "produce_acksall": ("produce, rdkafka_performance, acks=all", "msg/s", True),
    "consume": ("consume, rdkafka_performance", "msg/s", True),
    "tools_produce_acks0": ("produce, kafka-producer-perf-test, acks=0", "msg/s", True),
    "tools_produce_acks1": ("produce, kafka-producer-perf-test, acks=1", "msg/s", True),
    "tools_produce_acksall": ("produce, kafka-producer-perf-test, acks=all", "msg/s", True),
    "tools_produce_p99_ms": ("kafka-producer-perf-test's p99 latency (at full speed)", "ms", False),
    "tools_consume": ("consume, kafka-consumer-perf-test", "msg/s", True),
    **{row: (label, "ms", False) for row, label in kafka_latency.row_labels().items()},
    "cpu_produce_acks1": ("broker CPU per million messages, rdkafka_performance produce acks=1", "s", False),
    "cpu_produce_acksall": ("broker CPU per million messages, rdkafka_performance produce acks=all", "s", False),
    "cpu_consume": ("broker CPU per million messages, rdkafka_performance consume", "s", False),
    "rss_rest_mib": ("broker RSS at rest", "MiB", False),
    "pss_rest_mib": ("broker PSS at rest (shared pages counted once)", "MiB", False),
    "rss_load_mib": ("broker RSS under load (peak)", "MiB", False),
    "pss_load_mib": ("broker PSS under load (peak)", "MiB", False),
    "startup_s": ("start-up until Metadata answers", "s", False),
    "disk_bytes_per_message": ("disk bytes per 200 B message", "B", False),
}
ROWS.update(kafka_cluster_compare.ROWS)  # three nodes of each: their own runs (``cluster_runs``)
BROKERS = ("mpbroker", "kafka")


class RssSampler:
    """The peak resident memory and proportional set size of a process tree, sampled on a
    thread every 100 ms."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.peak_pss, self._stop = pid, 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.1)

    def _sample(self):
        self.peak = max(self.peak, tree_rss_bytes(self.pid))
        self.peak_pss = max(self.peak_pss, tree_pss_bytes(self.pid))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def topic_bytes(log_dir: str, topic: str) -> int:
    """Allocated bytes of ``topic``'s partition directories (``<topic>-<n>``) under ``log_dir``."""
    return sum(allocated_bytes(os.path.join(log_dir, name)) for name in os.listdir(log_dir)
               if name.rsplit("-", 1)[0] == topic and os.path.isdir(os.path.join(log_dir, name)))


def one_run(broker: str, args, run: int) -> dict:
    """Start a fresh broker, take every row's figure, stop it; the figures and the CPU."""
    # mpbroker's BenchBroker makes (and removes) its own directory: a short path, for its unix socket
    scratch = tempfile.mkdtemp(prefix="kafka-compare-", dir=args.dir) if broker == "kafka" else None
    try:
        if broker == "kafka":
            server = kafka_node(scratch)
            server.format_storage()  # not part of the start-up time
            host, port, log_dir = server.host, server.kafka_port, server.log_dir
        else:
            server = mpbroker_node(args.dir)
            host, port, log_dir = server.host, int(server.properties["kafka.port"]), server.log_dir
        figures = {}
        try:
            figures["startup_s"] = timed_start(server.start, host, port)
            time.sleep(args.rest)
            pid = server.process.pid
            figures["rss_rest_mib"] = tree_rss_bytes(pid) / 2**20
            figures["pss_rest_mib"] = tree_pss_bytes(pid) / 2**20
            topics = {row: f"{row}-{run}" for row in (*ACKS, "warmup", *(TOOLS_ACKS if args.tools else ()))}
            for topic in topics.values():
                create_topic(server, topic)
            cpu = {}
            with RssSampler(pid) as sampler:
                if args.program and args.warmup:  # not measured: a JVM compiles its hot paths first
                    rdkafka_perf.produce(args.program, server.bootstrap, topics["warmup"], args.warmup,
                                         size=MESSAGE_BYTES, acks=1, conf={"linger.ms": LINGER_MS})
                    rdkafka_perf.consume(args.program, server.bootstrap, topics["warmup"], args.warmup)
                if args.program:
                    for row, acks in ACKS.items():
                        before = tree_cpu_seconds(pid)
                        result = rdkafka_perf.produce(args.program, server.bootstrap, topics[row], args.messages,
                                                      size=MESSAGE_BYTES, acks=acks, conf={"linger.ms": LINGER_MS})
                        figures[row] = result["messages"] / result["seconds"]
                        cpu[row] = tree_cpu_seconds(pid) - before
                    before = tree_cpu_seconds(pid)
                    result = rdkafka_perf.consume(args.program, server.bootstrap, topics["produce_acks1"],
                                                  args.messages)
                    figures["consume"] = result["messages"] / result["seconds"]
                    cpu["consume"] = tree_cpu_seconds(pid) - before
                if args.tools:
                    for row, acks in TOOLS_ACKS.items():
                        before = tree_cpu_seconds(pid)
                        result = kafka_tools_perf.produce(server.bootstrap, topics[row], args.messages,
                                                          size=MESSAGE_BYTES, acks=acks, linger_ms=LINGER_MS)
                        figures[row] = result["messages_per_s"]
                        cpu[row] = tree_cpu_seconds(pid) - before
                        if row == "tools_produce_acks1":
                            figures["tools_produce_p99_ms"] = result["p99_ms"]
                    before = tree_cpu_seconds(pid)
                    result = kafka_tools_perf.consume(server.bootstrap, topics["tools_produce_acks1"], args.messages)
                    figures["tools_consume"] = result["messages_per_s"]
                    cpu["tools_consume"] = tree_cpu_seconds(pid) - before
            latency = None
            if args.latency:  # after the throughput rows, outside their memory and CPU figures
                latency_figures, latency = kafka_latency.compare_rows(server, run, args.latency_seconds)
                figures.update(latency_figures)
            figures["rss_load_mib"] = sampler.peak / 2**20
            figures["pss_load_mib"] = sampler.peak_pss / 2**20
            for row in ("produce_acks1", "produce_acksall", "consume"):
                if row in cpu:
                    figures[f"cpu_{row}"] = cpu[row] / args.messages * 1e6
            if args.program:
                stored = sum(topic_bytes(log_dir, topics[row]) for row in ("produce_acks1", "produce_acksall"))
                figures["disk_bytes_per_message"] = stored / (2 * args.messages)
        finally:
            server.__exit__(None, None, None)
        left = server.process.poll() is None
        print(f"  {broker:8} run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items()), flush=True)
        return {"figures": figures, "broker_cpu_s": cpu, "latency": latency, "process_left": left}
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def summary(name: str, runs: dict) -> dict:
    label, unit, higher = ROWS[name]
    values = {broker: [run["figures"][name] for run in runs[broker] if name in run["figures"]] for broker in BROKERS}
    row = {"row": name, "label": label, "unit": unit, "higher_is_better": higher, "runs": values}
    if all(values.values()):
        row.update({broker: statistics.median(values[broker]) for broker in BROKERS})
        mp, kafka = row["mpbroker"], row["kafka"]
        row["ratio"] = (mp / kafka if higher else kafka / mp) if min(mp, kafka) > 0 else None
        row["ratio_kind"] = "mpbroker/Kafka" if higher else "Kafka/mpbroker"
    return row


def cell(value, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if unit == "s" else f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5,000 messages, 1 run, short rest (a check, seconds)")
    parser.add_argument("--messages", type=int, help="messages per produce row (default 1,000,000)")
    parser.add_argument("--runs", type=int, help="interleaved runs of each broker (default 5)")
    parser.add_argument("--rest", type=float, help="seconds a broker rests before its RSS at rest (default 3)")
    parser.add_argument("--kafka-tools", dest="tools", action=argparse.BooleanOptionalAction, default=True,
                        help="the kafka-producer-perf-test / kafka-consumer-perf-test rows (default: on)")
    parser.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=True,
                        help="the three-node RF 3 rows (rf3_*; default: on)")
    parser.add_argument("--one-node", dest="one_node", action=argparse.BooleanOptionalAction, default=True,
                        help="the one-node rows, every row but rf3_* (default: on)")
    parser.add_argument("--latency", action=argparse.BooleanOptionalAction, default=True,
                        help="the end-to-end latency rows at 1,000 and 10,000 msg/s (default: on)")
    parser.add_argument("--latency-seconds", type=float,
                        help=f"seconds measured at each latency rate (default {kafka_latency.SECONDS:g}, "
                             f"--quick {kafka_latency.QUICK_SECONDS:g})")
    parser.add_argument("--warmup", type=int, help="messages produced and consumed unmeasured first (default 100,000)")
    parser.add_argument("--dir", default=None, help="where the brokers' files go (default: TMPDIR)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where kafka_compare.json and .md go")
    args = parser.parse_args(argv)
    for key, value in SIZES["quick" if args.quick else "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.latency_seconds is None:
        args.latency_seconds = kafka_latency.QUICK_SECONDS if args.quick else kafka_latency.SECONDS
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    stop_on_signals()
    if not apache_kafka.available():
        print(f"Apache Kafka cannot run here, nothing to compare: {apache_kafka.missing()}", file=sys.stderr)
        return 1
    args.program, rdkafka_missing = None, ""
    try:
        args.program = rdkafka_perf.program(log=lambda line: print(line, flush=True))
    except rdkafka_perf.Unavailable as error:
        rdkafka_missing = str(error)
        print(f"the rdkafka_performance rows are left out: {rdkafka_missing}", flush=True)
    apache_kafka.fetch_jars()
    tools_missing = "" if args.tools else "--no-kafka-tools"
    if args.tools:
        try:
            apache_kafka.fetch_tools()
        except apache_kafka.ApacheKafkaError as error:
            args.tools, tools_missing = False, str(error)[:500]
            print(f"the kafka-*-perf-test rows are left out: {tools_missing}", flush=True)
    settings = fair(1)
    print(f"settings on both: {settings}", flush=True)
    load_before = os.getloadavg()
    runs = {broker: [] for broker in BROKERS}
    for run in range(args.runs if args.one_node else 0):
        for broker in BROKERS:
            runs[broker].append(one_run(broker, args, run))
    cluster_missing = ("--no-cluster" if not args.cluster else "no rdkafka_performance (above)" if rdkafka_missing
                       else kafka_cluster_compare.missing())
    cluster_runs = {} if cluster_missing else kafka_cluster_compare.interleaved(args, MESSAGE_BYTES, LINGER_MS)
    load_after = os.getloadavg()
    rows = [summary(name, {broker: runs[broker] + cluster_runs.get(broker, []) for broker in BROKERS})
            for name in ROWS]
    rows = [row for row in rows if "ratio" in row]
    print()
    table = print_table(
        f"mpbroker beside Apache Kafka {apache_kafka.DEFAULT_VERSION}, one node each (three for the RF 3 rows), "
        f"the same client "
        f"(librdkafka's rdkafka_performance), {args.messages:,} messages of {MESSAGE_BYTES} B a produce row, "
        f"medians of {args.runs} interleaved runs; ratio above 1: mpbroker better "
        f"(mpbroker/Kafka for msg/s, Kafka/mpbroker for MiB, s, ms and B)",
        ["row", "unit", "mpbroker", f"Kafka {apache_kafka.DEFAULT_VERSION}", "ratio", "ratio is"],
        [[row["label"], row["unit"], cell(row["mpbroker"], row["unit"]), cell(row["kafka"], row["unit"]),
          f"{row['ratio']:.2f}x" if row["ratio"] else "-", row["ratio_kind"]] for row in rows])
    notes = [f"Settings on both: flush {settings['flush']}; segment {settings['segment_bytes']:,} B; "
             f"{settings['partitions']} partition a topic; replication factor {settings['replication_factor']}; "
             f"min.insync.replicas {settings['min_insync_replicas']}; Kafka heap {settings['kafka_heap']}; "
             f"producer linger.ms {LINGER_MS}, librdkafka's other defaults; {args.warmup:,} messages produced "
             f"and consumed unmeasured first on each broker (JIT warm-up).",
             "Runs interleaved (mpbroker, Kafka, mpbroker, ...), one broker up at a time, each run a fresh broker: "
             "the machine is shared and noisy, interleaving puts its noise on both alike."]
    if args.latency:
        notes.append(f"Latency rows: confluent-kafka producer and consumer, each a process of its own; producer acks=1, "
                     f"linger.ms 0, consumer at librdkafka's defaults; {args.latency_seconds:g} s measured at each rate, "
                     "a fresh topic each (every run's sent, received and skipped counts in the JSON).")
    if rdkafka_missing:
        notes.append(f"The rdkafka_performance rows and the disk row are left out: {rdkafka_missing}")
    if tools_missing:
        notes.append(f"The kafka-*-perf-test rows are left out: {tools_missing}")
    if cluster_missing:
        notes.append(f"The three-node rows are left out: {cluster_missing}")
    else:
        notes.append("Three nodes of each for the RF 3 rows: replication factor 3, min.insync.replicas 2, the "
                     "settings above otherwise; mpbroker's cluster is three brokers and a ZooKeeper (a JVM), "
                     "whose CPU and start-up are counted in its rows.")
        notes.append(kafka_cluster_compare.cpu_note(cluster_runs, args.messages))
    left = [broker for broker in BROKERS for run in runs[broker] + cluster_runs.get(broker, [])
            if run["process_left"]]
    if left:
        notes.append(f"A broker process was still running after its stop: {left}")
    load = (f"load average (1 min) {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end")
    versions = {"apache_kafka": apache_kafka.DEFAULT_VERSION, "java": java_version(), "commit": git_commit(),
                "rdkafka_performance": rdkafka_perf.built_info(args.program) if args.program else None}
    print("\n".join([*notes, load, f"versions: {versions}"]))
    write_results("kafka_compare", "\n\n".join([table, *notes, load, f"Versions: {versions}"]), {
        "settings": {**settings, "messages": args.messages, "runs": args.runs, "rest_s": args.rest,
                     "warmup": args.warmup,
                     "latency_seconds": args.latency_seconds if args.latency else None,
                     "message_bytes": MESSAGE_BYTES, "linger_ms": LINGER_MS, "quick": args.quick},
        "cluster_settings": fair(3) if cluster_runs else None,
        "versions": versions, "rows": rows, "runs": runs, "cluster_runs": cluster_runs,
        "rdkafka_performance_left_out": rdkafka_missing or None, "kafka_tools_left_out": tools_missing or None,
        "cluster_left_out": cluster_missing or None,
        "load_average": {"start": [round(x, 2) for x in load_before], "end": [round(x, 2) for x in load_after]},
    }, args.results_dir)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
