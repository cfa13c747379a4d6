"""RabbitMQ in the paper benchmark, driven by pika: a durable queue per run, persistent
messages (delivery_mode=2).

Producer modes: plain ``basic_publish`` (fire-and-forget; the clock stops when the queue
holds every message), and publisher confirms, per message and in batches of 50 (publish
50, wait until the broker confirmed them all: it confirms a persistent message once it
is on disk). Consumer: ``basic_qos(prefetch_count=1000)``, acknowledgements every 500
messages with ``multiple=True``.
"""

import time

import pika

from bench.paper.messages import make_payload
from bench.peers.rabbitmq import RabbitMQServer

PREFETCH = 1000
ACK_EVERY = PREFETCH // 2
STALL_TIMEOUT = 60.0
PERSISTENT = pika.BasicProperties(delivery_mode=2)

# mode -> (label, messages per confirmed batch; 0: no confirms)
MODES = {
    "ack-1": ("publisher confirms, every message", 1),
    "ack-50": ("publisher confirms, batches of 50", 50),
    "ff": ("basic_publish, no confirms", 0),
}


class _ConfirmedPublisher:
    """Publishes ``count`` messages in batches of ``batch`` on a SelectConnection, each
    batch sent when the broker confirmed every message of the one before."""

    def __init__(self, parameters, queue: str, count: int, batch: int, timeline):
        self.parameters = parameters
        self.queue = queue
        self.count = count - count % batch
        self.batch = batch
        self.timeline = timeline
        self.payload = make_payload()
        self.published = self.confirmed = 0
        self.channel = None
        self.error = None

    def run(self) -> int:
        self.connection = pika.SelectConnection(self.parameters, on_open_callback=self._on_open,
                                                on_open_error_callback=self._on_failure,
                                                on_close_callback=self._on_closed)
        self.connection.ioloop.start()
        if self.error is not None:
            raise RuntimeError(f"rabbitmq publisher: {self.error}")
        return self.confirmed

    def _on_open(self, connection) -> None:
        connection.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel) -> None:
        self.channel = channel
        channel.queue_declare(self.queue, durable=True, callback=self._on_declared)

    def _on_declared(self, _frame) -> None:
        self.channel.confirm_delivery(self._on_confirm, callback=self._on_confirm_mode)

    def _on_confirm_mode(self, _frame) -> None:
        self.timeline.start()
        self._publish_batch()

    def _publish_batch(self) -> None:
        publish = self.channel.basic_publish
        for _ in range(self.batch):
            publish("", self.queue, self.payload, PERSISTENT)
        self.published += self.batch

    def _on_confirm(self, frame) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self.error = f"the broker refused message {method.delivery_tag}"
            self.connection.close()
            return
        self.confirmed = method.delivery_tag if method.multiple else self.confirmed + 1
        if self.confirmed >= self.timeline.next_mark:
            self.timeline.mark(self.confirmed)
        if self.confirmed == self.published:
            if self.published < self.count:
                self._publish_batch()
            else:
                self.connection.close()

    def _on_failure(self, _connection, error) -> None:
        self.error = error
        self.connection.ioloop.stop()

    def _on_closed(self, _connection, reason) -> None:
        if self.confirmed < self.count and self.error is None:
            self.error = reason
        self.connection.ioloop.stop()


class RabbitMQSystem:
    name = "rabbitmq"
    modes = MODES
    per_message_ack_modes = ("ack-1",)
    consumed_mode = "ff"

    def __init__(self, base_dir: str | None = None):
        self.server = RabbitMQServer(base_dir)
        self.settings = {"queue": "classic, durable", "delivery_mode": 2, "prefetch": PREFETCH}

    def __enter__(self) -> "RabbitMQSystem":
        self.server.__enter__()
        self.parameters = pika.ConnectionParameters("127.0.0.1", self.server.port, heartbeat=0)
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)

    def versions(self) -> dict:
        return {"rabbitmq": self.server.version(), "pika": pika.__version__}

    def disk_bytes(self) -> int:
        return self.server.data_bytes()

    @staticmethod
    def queue(mode: str) -> str:
        return f"paper-{mode}"

    def _queue_depth(self, channel, queue: str) -> int:
        return channel.queue_declare(queue, durable=True, passive=True).method.message_count

    def produce(self, mode: str, count: int, timeline) -> dict:
        label, batch = MODES[mode]
        queue = self.queue(mode)
        if batch:
            sent = _ConfirmedPublisher(self.parameters, queue, count, batch, timeline).run()
            return timeline.finish(sent, label=label)
        connection = pika.BlockingConnection(self.parameters)
        try:
            channel = connection.channel()
            channel.queue_declare(queue, durable=True)
            payload = make_payload()
            publish = channel.basic_publish
            timeline.start()
            for sent in range(1, count + 1):
                publish("", queue, payload, PERSISTENT)
                if sent >= timeline.next_mark:
                    timeline.mark(sent)
            while self._queue_depth(channel, queue) < count:  # until the queue holds them all
                time.sleep(0.01)
            return timeline.finish(count, label=label)
        finally:
            connection.close()

    def discard(self, mode: str) -> None:
        """Delete a queue that is not read back (its messages would sit in memory)."""
        connection = pika.BlockingConnection(self.parameters)
        try:
            connection.channel().queue_delete(self.queue(mode))
        finally:
            connection.close()

    def consume(self, mode: str, count: int, timeline) -> dict:
        queue = self.queue(mode)
        connection = pika.BlockingConnection(self.parameters)
        received = 0
        try:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=PREFETCH)
            timeline.start()
            for method, _properties, _body in channel.consume(queue, inactivity_timeout=STALL_TIMEOUT):
                if method is None:
                    raise RuntimeError(f"rabbitmq consumer stalled at {received} of {count} messages")
                received += 1
                if received % ACK_EVERY == 0 or received == count:
                    channel.basic_ack(method.delivery_tag, multiple=True)
                if received >= timeline.next_mark:
                    timeline.mark(received)
                if received == count:
                    break
            result = timeline.finish(received, label=f"basic_consume, prefetch {PREFETCH}, acks every {ACK_EVERY}")
            channel.cancel()
            left = self._queue_depth(channel, queue)
        finally:
            connection.close()
        if left:
            raise RuntimeError(f"rabbitmq: {left} messages left in {queue} after the consumer")
        return result
