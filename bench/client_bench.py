"""The Python clients against a real broker: what an application gets.

    python -m bench.client_bench [--messages N] [--sync-messages N]

Producer (``clients.Producer``, 200-byte messages, no keys): sync with one message per
``send`` call; async with batches of 50 (fire-and-forget, and acknowledged once
appended); the clock stops when the broker holds every byte (fire-and-forget) or
``close`` returned (acknowledged). Consumer (``clients.SimpleConsumer.messages``, 1 MB
fetches, every message CRC-checked, payloads as ``bytes`` with their offsets):
messages/s and MB/s reading everything back one message at a time (``messages()``)
and a decoded answer at a time (``message_sets()``), and the decoding alone
(``MessageSet`` from a 1 MB answer already in memory).
"""

import argparse
import os
import time

from bench.broker_process import BenchBroker
from bench.common import best_of, print_table, write_results
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.consumer.simple_consumer import MessageSet
from mpbroker.codec.message import encode_message_set

MESSAGE_BYTES = 200
STORED_BYTES = MESSAGE_BYTES + 10


def wait_for_bytes(broker, topic: str, expected: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [p for p in broker.status()["partitions"] if p["topic"] == topic]
        if sum(p["log_end"] for p in rows) >= expected:
            return
        time.sleep(0.01)
    raise RuntimeError(f"{topic}: the broker never held {expected} bytes")


def produce(broker, topic: str, count: int, **settings) -> float:
    payload = os.urandom(MESSAGE_BYTES)
    producer = Producer(broker_list=f"127.0.0.1:{broker.port}", **settings)
    producer.partitions_for(topic)  # discovery is not part of the measurement
    started = time.perf_counter()
    send = producer.send
    for _ in range(count):
        send(topic, payload)
    producer.close()
    if settings.get("acks", "none") == "none":
        wait_for_bytes(broker, topic, count * STORED_BYTES)
    return time.perf_counter() - started


def consume(broker, topic: str, partitions: int) -> tuple:
    """One message at a time: ``messages()``."""
    messages = nbytes = 0
    started = time.perf_counter()
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        for partition in range(partitions):
            for message in consumer.messages(topic, partition, 0):
                messages += 1
                nbytes += len(message.payload)
    return messages, nbytes, time.perf_counter() - started


def consume_in_bulk(broker, topic: str, partitions: int) -> tuple:
    """A decoded answer at a time: ``message_sets()``, payloads as a list."""
    messages = nbytes = 0
    started = time.perf_counter()
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        for partition in range(partitions):
            for message_set in consumer.message_sets(topic, partition, 0):
                messages += len(message_set.payloads)
                nbytes += sum(map(len, message_set.payloads))
    return messages, nbytes, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages for async and consumer runs")
    parser.add_argument("--sync-messages", type=int, default=100_000, help="messages for the sync run")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    rows, data = [], {}
    with BenchBroker(args.dir, num_workers=2, num_partitions=2) as broker:
        runs = [
            ("producer sync, 1 message per send", "sync", args.sync_messages, {"producer_type": "sync"}),
            ("producer async, batches of 50", "async", args.messages,
             {"producer_type": "async", "batch_size": 50, "queue_time": 100, "queue.enqueueTimeout.ms": -1}),
            ("producer async, batches of 50, acks=append", "async-ack", args.messages,
             {"producer_type": "async", "batch_size": 50, "queue_time": 100, "queue.enqueueTimeout.ms": -1,
              "acks": "append"}),
        ]
        for label, topic, count, settings in runs:
            seconds = produce(broker, topic, count, **settings)
            rows.append([label, f"{count / seconds:,.0f}", f"{count * MESSAGE_BYTES / seconds / 1e6:,.1f}"])
            data[topic] = {"messages": count, "seconds": seconds, "messages_per_s": count / seconds}
        for label, name, reader in (("consumer, SimpleConsumer.messages(), 1 MB fetches", "consumer", consume),
                                    ("consumer, SimpleConsumer.message_sets() (bulk)", "consumer_bulk",
                                     consume_in_bulk)):
            messages, nbytes, seconds = reader(broker, "async", 2)
            assert messages == args.messages, messages
            rows.append([label, f"{messages / seconds:,.0f}", f"{nbytes / seconds / 1e6:,.1f}"])
            data[name] = {"messages": messages, "seconds": seconds, "messages_per_s": messages / seconds,
                          "payload_mb_per_s": nbytes / seconds / 1e6}
    answer = encode_message_set([os.urandom(MESSAGE_BYTES)] * (1024 * 1024 // STORED_BYTES))
    count = len(answer) // STORED_BYTES
    seconds = best_of(5, lambda: MessageSet("t", 0, 0, 0, answer))
    rows.append(["decode only: MessageSet of a 1 MB answer", f"{count / seconds:,.0f}",
                 f"{count * MESSAGE_BYTES / seconds / 1e6:,.1f}"])
    data["decode"] = {"messages_per_s": count / seconds}
    table = print_table("Python clients against a real broker (2 workers, 200-byte messages; MB/s of payload)",
                        ["client", "messages/s", "MB/s"], rows)
    write_results("clients", table, data)


if __name__ == "__main__":
    main()
