"""Fire-and-forget load for the power-cut test: 0.7 PRODUCE frames (no answer) of
larger messages to random partitions, beside the acknowledged load, so that segments
roll between flushes and unflushed bytes sit in front of, between and behind the
flush-acknowledged ones. Nothing it sends is checked except that the logs stay valid;
a broken connection (the broker was cut) is reopened at the broker's current port."""

import random
import threading

from tests.broker.wire import WireClient


class FireAndForgetLoad:
    def __init__(self, port_of, topic: str, partitions: int, *, seed: int, messages: int = 20,
                 payload_bytes: int = 400, pause_s: float = 0.01):
        self._port_of = port_of  # callable: the broker's current port
        self.topic = topic
        self.partitions = partitions
        self.messages = messages
        self.payload_bytes = payload_bytes
        self.pause_s = pause_s
        self.sent_requests = 0
        self.reconnects = 0
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "FireAndForgetLoad":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 30) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "fire-and-forget load hung"

    def _run(self) -> None:
        client = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = WireClient(self._port_of(), timeout=5)
                client.produce(self.topic, self._rng.randrange(self.partitions), self._payloads())
                self.sent_requests += 1
            except OSError:
                if client is not None:
                    client.close()
                client = None
                self.reconnects += 1
                self._stop.wait(0.05)
                continue
            self._stop.wait(self.pause_s)
        if client is not None:
            client.close()

    def _payloads(self) -> list:
        tag = f"ff-{self.sent_requests}-"
        return [(tag + str(n)).encode().ljust(self.payload_bytes, b"f") for n in range(self.messages)]
