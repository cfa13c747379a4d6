"""End-to-end latency at a steady rate through a broker's Kafka listener, the same client
(confluent-kafka) against mpbroker or Apache Kafka: the latency rows of
``bench/kafka_compare.py``.

    python -m bench.kafka_latency --bootstrap HOST:PORT [--rate 10000] [--seconds 10] [--topic T]

A producer process and a consumer process (``bench/kafka_latency_member.py``, each its own
interpreter, so neither's loop delays the other) on partition 0 of a fresh topic of one
partition: the consumer is assigned to it from the beginning and reading before the
producer starts; the producer sends 200-byte values stamped with CLOCK_MONOTONIC (one
clock for every process of the machine) at ``rate`` a second, what is due every
millisecond, acks=1, linger.ms 0, librdkafka's other defaults; the consumer, at
librdkafka's defaults (``fetch.wait.max.ms`` 500, ``fetch.min.bytes`` 1: the broker must
answer a waiting fetch as soon as data arrives), takes each message's receipt time minus
its stamp. The producer runs ``warm-up + seconds + cool-down``; the messages sent in the
warm-up and the cool-down are left out, p50/p99/p99.9 (nearest rank,
``bench.latency.percentiles``) are of the rest. Every message sent must arrive, else
``Shortfall`` says how many did not. ``compare_rows`` (kafka_compare's rows: 1,000 and
10,000 msg/s) runs once unmeasured before them, on each broker alike.
"""

import argparse
import array
import json
import os
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Producer

from bench.latency.percentiles import steady_latencies, summary_ms
from bench.modern_bench import create_topic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATES = {"1k": 1_000, "10k": 10_000}  # row suffix -> messages a second
PERCENTILES = {"p50": "p50_ms", "p99": "p99_ms", "p999": "p99_9_ms"}  # row part -> summary_ms key
SECONDS, QUICK_SECONDS = 10.0, 1.0  # measured seconds a rate, kafka_compare's default and --quick
EXPECT_TIMEOUT_S = 30.0  # how long the consumer waits for the last messages after the producer's end


class Shortfall(RuntimeError):
    """Fewer messages arrived than were sent."""


def warmup_cooldown(seconds: float) -> tuple[float, float]:
    """The seconds left out before and after ``seconds`` measured: 2 and 1, less for short runs."""
    return min(2.0, seconds / 2), min(1.0, seconds / 4)


def warmup_run_seconds(seconds: float) -> float:
    """The unmeasured run before the measured ones: Apache Kafka's first seconds on this path
    (small batches, fetches waiting for data), which its throughput rows do not take, are
    slow (a backlog of 400 ms built up and drained in the first 1.75 s of a first run, seen
    here), like a JVM's before its JIT has compiled them; mpbroker gets the same run. (Even
    after it, Kafka's C2 compiler thread was seen taking 31% of a core through a 10 s run.)"""
    return min(3.0, seconds / 2)


def row_labels() -> dict:
    """kafka_compare's rows, ``latency_p50_1k``, ``latency_p99_1k``, ..., ``latency_p999_10k``: their labels."""
    return {f"latency_{part}_{suffix}": f"end-to-end latency {key[:-3].replace('_', '.')} at {rate:,} msg/s, "
                                        "confluent-kafka" for suffix, rate in RATES.items()
            for part, key in PERCENTILES.items()}


def _member(role: str, settings: dict, stderr) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.kafka_latency_member", role, json.dumps(settings)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=REPO, text=True)


def _last_event(output: str, event: str, process: subprocess.Popen, stderr) -> dict:
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    if not events or events[-1]["event"] != event:
        stderr.seek(0)
        raise RuntimeError(f"a member ended (exit {process.poll()}) without saying {event}: {events[-1:]} "
                           f"{stderr.read().decode(errors='replace')[-2000:]}")
    return events[-1]


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


def measure(bootstrap: str, topic: str, rate: int, seconds: float, warmup_s: float | None = None,
            cooldown_s: float | None = None) -> dict:
    """One run on ``topic`` (one partition, created beforehand, empty): the sent, received and
    skipped counts, the achieved rate, and ``summary_ms``'s percentiles of the measured part."""
    default_warmup, default_cooldown = warmup_cooldown(seconds)
    warmup_s = default_warmup if warmup_s is None else warmup_s
    cooldown_s = default_cooldown if cooldown_s is None else cooldown_s
    total_s = warmup_s + seconds + cooldown_s
    with tempfile.TemporaryDirectory(prefix="kafka-latency-") as work, \
            tempfile.TemporaryFile() as consumer_err, tempfile.TemporaryFile() as producer_err:
        stamps_path = os.path.join(work, "stamps")
        consumer = _member("consume", {"bootstrap": bootstrap, "topic": topic, "stamps": stamps_path,
                                       "expect_timeout_s": EXPECT_TIMEOUT_S}, consumer_err)
        producer = _member("produce", {"bootstrap": bootstrap, "topic": topic, "rate": rate, "seconds": total_s},
                           producer_err)  # both start (import, connect) at once; the producer waits to go
        try:
            _last_event(consumer.stdout.readline(), "ready", consumer, consumer_err)
            _last_event(producer.stdout.readline(), "ready", producer, producer_err)
            output, _ = producer.communicate("go\n", timeout=total_s + 60)
            produced = _last_event(output, "produced", producer, producer_err)
            if produced["failed"] or produced["unflushed"]:
                raise RuntimeError(f"{topic}: {produced['failed']} deliveries failed ({produced['first_error']}), "
                                   f"{produced['unflushed']} unflushed, of {produced['sent']}")
            output, _ = consumer.communicate(f"expect {produced['sent']}\n", timeout=EXPECT_TIMEOUT_S + 30)
            consumed = _last_event(output, "consumed", consumer, consumer_err)
            stamps = array.array("q")
            with open(stamps_path, "rb") as f:
                stamps.frombytes(f.read())
        finally:
            for process in (consumer, producer):
                _stop(process)
    sent, received = produced["sent"], consumed["received"]
    if received < sent:
        raise Shortfall(f"{topic} at {rate:,} msg/s: {received:,} of {sent:,} messages arrived, "
                        f"{sent - received:,} missing after {EXPECT_TIMEOUT_S:.0f} s")
    pairs = list(zip(stamps[0::2], stamps[1::2]))
    latencies = steady_latencies(pairs, warmup_s, cooldown_s)
    if not latencies:
        raise RuntimeError(f"{topic}: no message in the measured part ({len(pairs)} received)")
    return {"rate": rate, "seconds": seconds, "warmup_s": warmup_s, "cooldown_s": cooldown_s, "sent": sent,
            "received": received, "skipped": produced["skipped"],
            "achieved_rate": round(sent / produced["seconds"], 1), **summary_ms(latencies)}


def compare_rows(server, run: int, seconds: float) -> tuple[dict, dict]:
    """kafka_compare's latency rows on ``server`` (either broker): a fresh topic for each rate,
    created as the other rows' are, after an unmeasured run (``warmup_run_seconds``) on a
    topic of its own. (figures by row name, each rate's whole ``measure``)."""
    warmup_topic = f"latency-warmup-{run}"
    create_topic(server, warmup_topic)
    measure(server.bootstrap, warmup_topic, max(RATES.values()), warmup_run_seconds(seconds))
    figures, details = {}, {}
    for suffix, rate in RATES.items():
        topic = f"latency-{suffix}-{run}"
        create_topic(server, topic)
        details[suffix] = result = measure(server.bootstrap, topic, rate, seconds)
        for part, key in PERCENTILES.items():
            figures[f"latency_{part}_{suffix}"] = result[key]
        print(f"    latency at {rate:,} msg/s: {result['sent']:,} sent ({result['skipped']:,} skipped by the pacing), "
              f"{result['received']:,} received, p50/p99/p99.9 {result['p50_ms']}/{result['p99_ms']}/"
              f"{result['p99_9_ms']} ms", flush=True)
    return figures, details


def create_fresh_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Create ``topic`` through a Metadata request (either broker auto-creates it) and wait for
    its partition 0 to have a leader."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout_s
    while True:
        described = producer.list_topics(topic, timeout=10).topics.get(topic)
        if described and described.error is None and 0 in described.partitions and \
                described.partitions[0].leader >= 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} was not created on {bootstrap}: {described and described.error}")
        time.sleep(0.05)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker's Kafka listener")
    parser.add_argument("--rate", type=int, default=10_000, help="messages a second (default 10,000)")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="seconds measured (default 10)")
    parser.add_argument("--topic", help="a topic that does not exist yet (default: latency-<rate>-<time>)")
    args = parser.parse_args(argv)
    topic = args.topic or f"latency-{args.rate}-{int(time.time())}"
    create_fresh_topic(args.bootstrap, topic)
    print(json.dumps(measure(args.bootstrap, topic, args.rate, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
