"""mpbroker in the paper benchmark, driven by its own clients: ``clients.Producer`` (sync:
one request per ``send``, a batch being a list of messages) and
``clients.SimpleConsumer.message_sets`` with ~200 KB fetches.

Producer modes: batch 1 and 50, fire-and-forget (0.7 PRODUCE; the clock stops when the
broker holds every byte) and acknowledged (PRODUCE_ACKED: ``append``, and at batch 50
also ``flush``, answered once the set is on disk like the peers' confirms and receipts).
"""

import importlib.metadata

from bench.broker_bench import wait_flushed
from bench.broker_process import BenchBroker
from bench.client_bench import wait_for_bytes
from bench.disk_usage import allocated_bytes
from bench.paper.messages import MESSAGE_BYTES, make_payload
from mpbroker.clients import Producer, SimpleConsumer

FETCH_BYTES = 200 * 1024
STORED_BYTES = MESSAGE_BYTES + 10  # the 0.7 message header is 10 bytes

# mode -> (label, messages per request, acks)
MODES = {
    "b1-ff": ("batch 1, fire-and-forget", 1, "none"),
    "b1-ack": ("batch 1, acknowledged (append)", 1, "append"),
    "b50-ff": ("batch 50, fire-and-forget", 50, "none"),
    "b50-ack": ("batch 50, acknowledged (append)", 50, "append"),
    "b50-flush": ("batch 50, acknowledged (flushed)", 50, "flush"),
}


class MpbrokerSystem:
    name = "mpbroker"
    modes = MODES
    per_message_ack_modes = ("b1-ack",)  # run with fewer messages (one round trip each)
    consumed_mode = "b50-ff"  # what the consumer experiment reads back

    def __init__(self, base_dir: str | None = None, workers: int = 2, partitions: int = 2):
        self.partitions = partitions
        self.broker = BenchBroker(base_dir, num_workers=workers, num_partitions=partitions)
        self.settings = {"num.workers": workers, "partitions": partitions}

    def __enter__(self) -> "MpbrokerSystem":
        self.broker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.broker.__exit__(*exc)

    def versions(self) -> dict:
        return {"mpbroker": importlib.metadata.version("mpbroker")}

    def disk_bytes(self) -> int:
        return allocated_bytes(self.broker.log_dir, ".kafka")

    @staticmethod
    def topic(mode: str) -> str:
        return f"paper-{mode}"

    def produce(self, mode: str, count: int, timeline) -> dict:
        label, batch, acks = MODES[mode]
        topic = self.topic(mode)
        payload = make_payload()
        message = payload if batch == 1 else [payload] * batch
        producer = Producer(broker_list=f"127.0.0.1:{self.broker.port}", acks=acks)
        producer.partitions_for(topic)  # discovery is not part of the measurement
        send = producer.send
        sent = 0
        timeline.start()
        for _ in range(count // batch):
            send(topic, message)
            sent += batch
            if sent >= timeline.next_mark:
                timeline.mark(sent)
        producer.close()
        if acks == "none":
            wait_for_bytes(self.broker, topic, sent * STORED_BYTES)
        return timeline.finish(sent, label=label)

    def discard(self, mode: str) -> None:
        """Nothing to do: a topic that is not read again costs only disk."""

    def consume(self, mode: str, count: int, timeline) -> dict:
        topic = self.topic(mode)
        wait_flushed(self.broker, topic)  # a fetch sees only flushed data
        received = 0
        with SimpleConsumer("127.0.0.1", self.broker.port, fetch_size=FETCH_BYTES) as consumer:
            timeline.start()
            for partition in range(self.partitions):
                for message_set in consumer.message_sets(topic, partition, 0):
                    received += len(message_set.payloads)
                    if received >= timeline.next_mark:
                        timeline.mark(received)
        if received != count:
            raise RuntimeError(f"mpbroker: read {received} messages back, expected {count}")
        return timeline.finish(received, label=f"SimpleConsumer, {FETCH_BYTES // 1024} KB fetches")
