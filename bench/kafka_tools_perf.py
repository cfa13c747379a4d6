"""Kafka's own load tools, ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``
(the classes ``org.apache.kafka.tools.ProducerPerformance`` and ``ConsumerPerformance`` of
``org.apache.kafka:kafka-tools``, fetched with mvn by ``mpbroker.testing.apache_kafka.fetch_tools``
into ~/.cache/mpbroker-apache-kafka), run as a JVM child process against any Kafka listener:
Apache Kafka's or mpbroker's ``kafka.port``. A second client, in Java, beside librdkafka.

    result = produce(bootstrap, topic, count, size=200, acks=1)   # {"messages_per_s", "p50_ms", ...}
    result = consume(bootstrap, topic, count)                      # {"messages_per_s", ...}

The producer's rate is the tool's own (its clock from its first send to the last
acknowledgement: its JVM's warm-up is inside it, on either broker alike); the consumer's is
``fetch.nMsg.sec``, the rate once the group is joined (the join, ``rebalance.time.ms``, is
left out: a group's initial delay is a setting, not a speed). Both tools run with -Xmx512m.
"""

import os
import re
import shutil
import subprocess

from mpbroker.testing import apache_kafka

HEAP = "512m"
_PRODUCED = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", re.M)


def _java(main: str, *args, timeout: float) -> str:
    argv = [shutil.which("java") or "java", f"-Xmx{HEAP}", "-cp", os.path.join(apache_kafka.fetch_tools(), "*"),
            f"org.apache.kafka.tools.{main}", *args]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"{main} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return run.stdout


def parse_produced(output: str) -> dict:
    lines = _PRODUCED.findall(output)
    if not lines:
        raise ValueError(f"no ProducerPerformance summary line in:\n{output[-1500:]}")
    sent, rate, mb, avg, top, p50, p95, p99, p999 = lines[-1]
    return {"messages": int(sent), "messages_per_s": float(rate), "mb_per_s": float(mb), "avg_ms": float(avg),
            "max_ms": float(top), "p50_ms": int(p50), "p95_ms": int(p95), "p99_ms": int(p99), "p999_ms": int(p999)}


def parse_consumed(output: str) -> dict:
    """The CSV line after the header (``start.time, end.time, ...``)."""
    lines = output.strip().splitlines()
    for header, values in zip(lines, lines[1:]):
        if header.startswith("start.time"):
            row = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in values.split(","))))
            return {"messages": int(row["data.consumed.in.nMsg"]), "messages_per_s": float(row["fetch.nMsg.sec"]),
                    "rebalance_ms": int(row["rebalance.time.ms"]), "fetch_ms": int(row["fetch.time.ms"])}
    raise ValueError(f"no ConsumerPerformance summary in:\n{output[-1500:]}")


def produce(bootstrap: str, topic: str, count: int, size: int = 200, acks: int = 1, linger_ms: int = 5,
            timeout: float = 300) -> dict:
    """``count`` records of ``size`` bytes as fast as the tool goes (``--throughput -1``)."""
    result = parse_produced(_java("ProducerPerformance", "--topic", topic, "--num-records", str(count),
                                  "--record-size", str(size), "--throughput", "-1", "--command-property",
                                  f"bootstrap.servers={bootstrap}", f"acks={acks}", f"linger.ms={linger_ms}",
                                  timeout=timeout))
    if result["messages"] != count:
        raise RuntimeError(f"{topic}: ProducerPerformance sent {result['messages']} of {count}")
    return result


def consume(bootstrap: str, topic: str, count: int, timeout: float = 300) -> dict:
    """``count`` records of ``topic`` from its beginning, in a fresh consumer group."""
    result = parse_consumed(_java("ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                                  "--num-records", str(count), "--timeout", "60000", timeout=timeout))
    if result["messages"] < count:
        raise RuntimeError(f"{topic}: ConsumerPerformance read {result['messages']} of {count}")
    return result
