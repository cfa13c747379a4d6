"""End-to-end latency of mpbroker at a steady rate (issue 8): the time from a
producer's send to a consumer's receipt of each message.

    python -m bench.latency_bench [--rate 10000] [--seconds 20] [--warmup 2] [--cooldown 1]

One producer process sends 200-byte messages stamped with CLOCK_MONOTONIC at a steady
``--rate`` (sync ``clients.Producer``, fire-and-forget, the messages due at each moment
in one request); one consumer (``SimpleConsumer.message_sets``, follow mode, polling
every millisecond when it finds nothing) reads them, and each message's latency is the
time it was decoded minus its stamp. A fetch sees only flushed data, so the broker's
flush policy sets the latency: it runs once with the flush interval at 1 ms
(log.default.flush.interval.ms=1, log.default.flush.scheduler.interval.ms=1) and once
with the default settings. Messages sent in the first ``--warmup`` and the last
``--cooldown`` seconds are left out (the last ones wait for a time-based flush: the
stream ends before the message-count flush comes).
p50/p99/p99.9 go to bench/results/latency.{json,md}.
"""

import argparse
import time

from bench.broker_process import BenchBroker
from bench.common import print_table, write_results
from bench.interrupts import stop_on_signals
from bench.latency.paced_producer import start_paced_producer
from bench.latency.percentiles import steady_latencies, summary_ms
from bench.latency.timestamped import sent_at_ns
from mpbroker.clients import SimpleConsumer
from mpbroker.config.keys import KEYS

TOPIC = "latency"
FLUSH_1_MS = {"log.default.flush.interval.ms": 1, "log.default.flush.scheduler.interval.ms": 1}
CONFIGURATIONS = (("flush interval 1 ms", FLUSH_1_MS), ("default flush settings", {}))
FLUSH_KEYS = ("log.flush.interval", "log.default.flush.interval.ms", "log.default.flush.scheduler.interval.ms")


def flush_settings(overrides: dict) -> dict:
    """The flush keys as the broker will have them (its defaults, then ``overrides``)."""
    defaults = {key.name: key.default for key in KEYS if key.name in FLUSH_KEYS}
    defaults["log.default.flush.interval.ms"] = defaults["log.default.flush.interval.ms"] or \
        defaults["log.default.flush.scheduler.interval.ms"]
    return {**defaults, **{key: str(value) for key, value in overrides.items()}}


def consume_stamps(port: int, expected_messages, deadline: float) -> list:
    """Read the topic from its start until ``expected_messages()`` returns a number that
    was reached; ``[(sent at, received at), ...]`` in ns."""
    stamps = []
    with SimpleConsumer("127.0.0.1", port, backoff_increment_ms=1) as consumer:
        for message_set in consumer.message_sets(TOPIC, 0, 0, follow=True, max_wait_ms=10_000):
            now = time.monotonic_ns()
            stamps.extend((sent_at_ns(payload), now) for payload in message_set.payloads)
            expected = expected_messages()
            if (expected is not None and len(stamps) >= expected) or time.monotonic() > deadline:
                break
    return stamps


def measure(label: str, overrides: dict, args) -> dict:
    properties = {key.replace(".", "_"): value for key, value in overrides.items()}
    with BenchBroker(args.dir, num_workers=2, num_partitions=1, **properties) as broker:
        process, report = start_paced_producer(broker.port, TOPIC, args.rate, args.seconds)
        outcome = {}

        def expected_messages():
            if not outcome and report.poll():
                try:
                    outcome.update(report.recv())
                except EOFError:
                    raise RuntimeError(f"the paced producer ended with {process.exitcode}") from None
            return outcome.get("sent")

        try:
            stamps = consume_stamps(broker.port, expected_messages, time.monotonic() + args.seconds + 60)
        finally:
            process.join(args.seconds + 30)
            if process.is_alive():
                process.kill()
        expected_messages()
    latencies = steady_latencies(stamps, args.warmup, args.cooldown)
    if not latencies:
        raise RuntimeError(f"{label}: no message came back")
    sent = outcome.get("sent", 0)
    return {"label": label, "settings": flush_settings(overrides), "sent": sent, "received": len(stamps),
            "achieved_rate": round(sent / outcome["seconds"], 1) if outcome else None,
            **summary_ms(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="messages per second (default 10,000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per configuration (default 20)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds left out at the start (default 2)")
    parser.add_argument("--cooldown", type=float, default=1.0, help="seconds left out at the end (default 1)")
    parser.add_argument("--dir", default=None, help="where the broker's log.dir goes")
    args = parser.parse_args()
    stop_on_signals()
    results = []
    for label, overrides in CONFIGURATIONS:
        result = measure(label, overrides, args)
        print(f"{label}: {result}", flush=True)
        results.append(result)
    rows = [[r["label"], f"{r['achieved_rate']:,.0f}", f"{r['count']:,}", f"{r['p50_ms']:.2f}",
             f"{r['p99_ms']:.2f}", f"{r['p99_9_ms']:.2f}", f"{r['max_ms']:.2f}"] for r in results]
    table = print_table(f"mpbroker end-to-end latency at {args.rate:,} msg/s (200-byte messages, ms)",
                        ["broker flush settings", "msg/s sent", "measured", "p50", "p99", "p99.9", "max"], rows)
    settings = "\n".join(f"- {r['label']}: " + ", ".join(f"{k}={v}" for k, v in r["settings"].items())
                         for r in results)
    write_results("latency", f"{table}\n\n{settings}",
                  {"rate": args.rate, "seconds": args.seconds, "warmup": args.warmup, "cooldown": args.cooldown,
                   "runs": results})


if __name__ == "__main__":
    main()
