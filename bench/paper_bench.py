"""The Kafka paper's producer and consumer experiments on this machine: mpbroker next
to RabbitMQ and ActiveMQ (issue 8) and Apache Kafka 4.4 (issue 34).

    python -m bench.paper_bench [--messages N] [--systems mpbroker,rabbitmq,activemq,kafka] [--quick]

Each system runs privately on loopback (the peers from Debian's packages, installed if
missing, in temporary directories, stopped afterwards) and is driven by its usual Python
client: mpbroker by ``clients`` (Producer, SimpleConsumer), RabbitMQ by pika, ActiveMQ by
stomp.py, Kafka (``bench.kafka_peer``'s node, jars fetched with mvn) by confluent-kafka with
the paper's producer and consumer settings (``bench/paper/kafka_runs.py``). One producer sends N 200-byte messages per mode (the per-message-acknowledged
modes send --acked-1-messages: they run at a round trip per message); the peers'
messages are persistent. Then one consumer reads the fire-and-forget run back (mpbroker:
~200 KB fetches; RabbitMQ, ActiveMQ: prefetch 1000; Kafka: 200 KB fetches a partition). Disk: the growth of each system's data directory
per message produced. Throughput is sampled every --sample-every messages for the plot.

A system that cannot run here (Kafka without Java 17 or Maven) is left out, its column
too, with the reason in the report; a system that fails part-way fails the benchmark.

Writes paper.json, paper.md (tables, ratios, targets) and paper.png into bench/results/
(``--results-dir`` elsewhere).
"""

import argparse
import os
import platform
import sys
import time
import traceback

from bench.common import RESULTS_DIR
from bench.interrupts import stop_on_signals
from bench.paper.messages import MESSAGE_BYTES
from bench.paper.plot import plot
from bench.paper.profiling import client_profile, profile_brokers_into
from bench.paper.report import write_report
from bench.paper.timeline import Timeline
from bench.paper.unavailable import SystemUnavailable

SYSTEMS = ("mpbroker", "rabbitmq", "activemq", "kafka")


def make_system(name: str, args):
    if name == "mpbroker":
        from bench.paper.mpbroker_runs import MpbrokerSystem
        return MpbrokerSystem(args.dir, workers=args.workers, partitions=args.partitions)
    if name == "rabbitmq":
        from bench.paper.rabbitmq_runs import RabbitMQSystem
        return RabbitMQSystem(args.dir)
    if name == "activemq":
        from bench.paper.activemq_runs import ActiveMQSystem
        return ActiveMQSystem(args.dir)
    if name == "kafka":
        from bench.paper.kafka_runs import KafkaSystem
        return KafkaSystem(args.dir, partitions=args.partitions)
    raise SystemExit(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")


def settled_disk_bytes(system, timeout: float = 15.0) -> int:
    """The data directory's size once it stopped growing (the peers write their
    indexes and journals a moment after they confirmed)."""
    deadline = time.monotonic() + timeout
    size = system.disk_bytes()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = system.disk_bytes()
        if now == size:
            break
        size = now
    return size


def add_disk_figures(run: dict, grown_by: int) -> None:
    per_message = grown_by / run["messages"]
    run.update(disk_bytes=grown_by, disk_bytes_per_message=round(per_message, 1),
               overhead_bytes_per_message=round(per_message - MESSAGE_BYTES, 1))


def run_system(system, args, runs: list) -> None:
    """Every producer mode of ``system``, then the consumer; their records go to ``runs``
    as they finish (a failure part-way keeps the ones before it)."""
    profile_dir = args.profile if system.name == "mpbroker" else None
    for mode in system.modes:
        if args.modes and mode not in args.modes and mode != system.consumed_mode:
            continue
        count = args.acked_1_messages if mode in system.per_message_ack_modes else args.messages
        before = settled_disk_bytes(system)
        with client_profile(profile_dir, f"{system.name}-{mode}"):
            run = system.produce(mode, count, Timeline(min(args.sample_every, max(1, count // 10))))
        run.update(system=system.name, experiment="produce", mode=mode)
        add_disk_figures(run, settled_disk_bytes(system) - before)
        print(f"  {system.name:9} produce  {run['label']:45} {run['messages']:>9,} msgs "
              f"{run['messages_per_s']:>11,.0f} msg/s {run['mb_per_s']:>7.1f} MB/s "
              f"{run['disk_bytes_per_message']:>7.1f} B/msg on disk", flush=True)
        runs.append(run)
        if mode != system.consumed_mode:
            system.discard(mode)
    with client_profile(profile_dir, f"{system.name}-consume"):
        run = system.consume(system.consumed_mode, args.messages, Timeline(args.sample_every))
    run.update(system=system.name, experiment="consume", mode="consume")
    print(f"  {system.name:9} consume  {run['label']:45} {run['messages']:>9,} msgs "
          f"{run['messages_per_s']:>11,.0f} msg/s {run['mb_per_s']:>7.1f} MB/s", flush=True)
    runs.append(run)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per run (default 1,000,000)")
    parser.add_argument("--acked-1-messages", type=int, default=100_000,
                        help="messages for the runs acknowledged one message at a time (default 100,000)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated (default: all four)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100,000 messages (5,000 acked one by one)")
    parser.add_argument("--sample-every", type=int, default=None, help="messages between throughput samples "
                        "(default: a tenth of --messages)")
    parser.add_argument("--workers", type=int, default=2, help="mpbroker num.workers (default 2)")
    parser.add_argument("--partitions", type=int, default=2,
                        help="mpbroker's and Kafka's partitions per topic (default 2)")
    parser.add_argument("--dir", default=None, help="where the systems' data directories go (default: $TMPDIR)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where paper.{json,md,png} go")
    parser.add_argument("--modes", default="", help="only these producer modes, comma-separated (e.g. b50-ff,ff; "
                        "the mode the consumer reads always runs)")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="cProfile mpbroker's client runs and broker processes into DIR "
                        "(see bench/paper/profiling.py)")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.acked_1_messages = 100_000, 5_000
    args.sample_every = args.sample_every or max(1, args.messages // 10)
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    return args


def main() -> None:
    args = parse_args()
    stop_on_signals()
    if args.profile:
        profile_brokers_into(args.profile)
    runs, versions, settings = [], {"python": platform.python_version()}, {}
    load_at_start = os.getloadavg()
    failures, left_out = [], []
    for name in args.systems:
        print(f"{name}:", flush=True)
        try:
            try:
                system = make_system(name, args)
            except SystemUnavailable as why:
                print(f"  {name} left out: {why}", flush=True)
                left_out.append({"system": name, "reason": str(why)[:2000]})
                continue
            with system:
                versions.update(system.versions())
                settings[name] = system.settings
                run_system(system, args, runs)
        except Exception as exc:  # the other systems still run; the report names the failure
            traceback.print_exc()
            failures.append({"system": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    details = {"messages": args.messages, "acked_1_messages": args.acked_1_messages,
               "message_bytes": MESSAGE_BYTES, "sample_every": args.sample_every,
               "versions": versions, "settings": settings, "failures": failures,
               "left_out": left_out,
               "load_average": {"start": [round(x, 2) for x in load_at_start],
                                "end": [round(x, 2) for x in os.getloadavg()]}}
    print()
    write_report(runs, details, args.results_dir)
    png = plot(runs, os.path.join(args.results_dir, "paper.png"),
               f"{args.messages:,} messages of {MESSAGE_BYTES} bytes; " +
               ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"plot written to {png}")
    if failures:
        sys.exit(f"failed: {', '.join(failure['system'] for failure in failures)}")


if __name__ == "__main__":
    main()
