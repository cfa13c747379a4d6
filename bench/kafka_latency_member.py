"""The producer or the consumer of ``bench/kafka_latency.py``, a process of its own (so
that neither's Python loop delays the other), a confluent-kafka client reporting on
stdout, one JSON object a line.

    python -m bench.kafka_latency_member produce '{"bootstrap": ..., "topic": ..., "rate": R, "seconds": S}'
    python -m bench.kafka_latency_member consume '{"bootstrap": ..., "topic": ..., "stamps": PATH}'

``produce``: a ``Producer`` with acks=1 and linger.ms 0 (a latency measure: nothing held
back to fill a batch), librdkafka's other defaults, connected (the topic's metadata
fetched), says ``ready`` and waits for a line ``go`` on stdin before its clock starts.
Then partition 0 of the topic gets ``rate`` messages a second for ``seconds``
(``Pacing``), each a 200-byte value stamped with CLOCK_MONOTONIC
(``bench.latency.timestamped``) as it is handed to ``produce()``; then ``flush()``, and
it says ``produced`` with the counts (sent, skipped by the pacing, failed deliveries).

``consume``: a ``Consumer`` at librdkafka's defaults (``fetch.wait.max.ms`` 500,
``fetch.min.bytes`` 1: the broker answers as soon as data is there) but no auto commit,
assigned to partition 0 from the beginning (the topic is fresh), says ``ready`` and
reads. A message's receipt is the moment ``poll()`` handed over the first message there
(and ``consume(timeout=0)`` the others already queued behind it). A line ``expect N`` on
stdin says how many were sent: it stops once it has N, or ``expect_timeout_s`` after
that line, writes the stamps to the file ``stamps`` (``array('q')``: sent, received,
sent, received, ... in ns) and says ``consumed``.
"""

import array
import json
import math
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.latency.timestamped import sent_at_ns, stamped_payload

QUIET = {"log_level": 3}
TICK_S = 0.001  # the producer's loop: what is due is sent every millisecond
POLL_S = 0.05
DRAIN = 10_000  # messages taken at most from the client's queue at once, after the first


def say(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Pacing:
    """How many messages are due at each tick of a steady ``rate`` over ``seconds``.

    ``due(elapsed)`` gives what the schedule owes by then: this tick's messages, and at most
    one more tick's worth that a late tick left behind. A loop that was held up longer (its
    process not scheduled) does not send the backlog in a burst, which would measure the
    burst: what is owed beyond is ``skipped`` (counted, never sent)."""

    def __init__(self, rate: float, seconds: float, tick_s: float = TICK_S):
        self.rate, self.total = rate, int(rate * seconds)
        self.burst = 2 * max(1, math.ceil(rate * tick_s))
        self.accounted = 0  # sent or skipped
        self.skipped = 0

    def due(self, elapsed_s: float) -> int:
        owed = min(self.total, int(elapsed_s * self.rate)) - self.accounted
        if owed <= 0:
            return 0
        send = min(owed, self.burst)
        self.skipped += owed - send
        self.accounted += owed
        return send

    @property
    def done(self) -> bool:
        return self.accounted >= self.total


def produce(settings: dict) -> None:
    topic = settings["topic"]
    failed = []
    producer = Producer({"bootstrap.servers": settings["bootstrap"], "acks": 1, "linger.ms": 0, **QUIET})
    producer.list_topics(topic, timeout=30)
    say("ready")
    if sys.stdin.readline().split() != ["go"]:
        return  # the driver is gone
    def delivered(error, _message):
        if error is not None:
            failed.append(str(error))

    pacing = Pacing(settings["rate"], settings["seconds"])
    sent = 0
    started = next_tick = time.monotonic()
    while not pacing.done:
        for _ in range(pacing.due(time.monotonic() - started)):
            producer.produce(topic, stamped_payload(), partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        next_tick += TICK_S
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        elif pause < -TICK_S:  # held up: the next tick is from now, what it owes goes through due()
            next_tick = time.monotonic()
    seconds = time.monotonic() - started
    unflushed = producer.flush(30)
    say("produced", sent=sent, skipped=pacing.skipped, failed=len(failed), unflushed=unflushed,
        first_error=failed[0] if failed else None, seconds=seconds)


def consume(settings: dict) -> None:
    expected = []
    arrived = threading.Event()

    def read_expectation():
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["expect"]:
                expected.append((int(words[1]), time.monotonic()))
                arrived.set()
                return
        expected.append((None, time.monotonic()))  # the driver is gone
        arrived.set()

    consumer = Consumer({"bootstrap.servers": settings["bootstrap"], "group.id": "kafka-latency",
                         "enable.auto.commit": False, **QUIET})
    consumer.list_topics(settings["topic"], timeout=30)
    consumer.assign([TopicPartition(settings["topic"], 0, OFFSET_BEGINNING)])
    threading.Thread(target=read_expectation, daemon=True).start()
    say("ready")
    stamps = array.array("q")
    received = 0
    while True:
        # poll() returns with the first message there; consume() would wait out its timeout for a
        # full batch (librdkafka's consume_batch), so it only takes, without waiting, what is queued
        first = consumer.poll(POLL_S)
        messages = [first, *consumer.consume(num_messages=DRAIN, timeout=0)] if first is not None else []
        now = time.monotonic_ns()
        for message in messages:
            if message.error() is not None:
                say("error", what=str(message.error()))
                sys.exit(1)
            stamps.extend((sent_at_ns(message.value()), now))
        received += len(messages)
        if arrived.is_set():
            count, told_at = expected[0]
            if count is None or received >= count or time.monotonic() > told_at + settings["expect_timeout_s"]:
                break
    consumer.close()
    with open(settings["stamps"], "wb") as f:
        stamps.tofile(f)
    say("consumed", received=received)


def main(argv=None) -> int:
    role, settings = (argv or sys.argv[1:])[:2]
    {"produce": produce, "consume": consume}[role](json.loads(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
