"""A producer at a steady rate, in a process of its own (so the consumer's polling does
not share its interpreter): every loop iteration sends, as one request, the messages
that are due by now, each stamped with the moment it is sent; ``rate`` messages per
second for ``seconds``. The parent gets the number sent through a pipe."""

import multiprocessing
import time

from bench.latency.timestamped import stamped_payload
from mpbroker.clients import Producer


def produce_at_rate(port: int, topic: str, rate: int, seconds: float, report) -> None:
    producer = Producer(broker_list=f"127.0.0.1:{port}")
    producer.partitions_for(topic)
    total = int(rate * seconds)
    sent = 0
    started = time.monotonic()
    while sent < total:
        elapsed = time.monotonic() - started
        due = min(total, int(elapsed * rate) + 1) - sent
        if due <= 0:
            time.sleep(min(0.0005, (sent + 1) / rate - elapsed))
            continue
        producer.send(topic, [stamped_payload() for _ in range(due)])
        sent += due
    producer.close()
    report.send({"sent": sent, "seconds": time.monotonic() - started})
    report.close()


def start_paced_producer(port: int, topic: str, rate: int, seconds: float) -> tuple:
    """(process, connection the sent count arrives on)."""
    receiver, sender = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=produce_at_rate, args=(port, topic, rate, seconds, sender),
                                      name="paced-producer", daemon=True)
    process.start()
    sender.close()
    return process, receiver
