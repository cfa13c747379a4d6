"""Acknowledged load for fault tests: threads that produce uniquely numbered messages
with PRODUCE_ACKED, retrying on PartitionUnavailable and on closed connections, and
remembering exactly which messages the broker acknowledged (and with which
durability). ``requests=None`` runs until ``stop()``."""

import itertools
import threading
import time

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from mpbroker.codec.message_set import iter_messages

from .wire import WireClient


class AckedLoad:
    def __init__(self, port_of, topic: str, partitions: int, *, threads: int = 4, requests: int | None = 60,
                 batch: int = 10, durability: int = 1, durability_of=None, retry_for_s: float = 60):
        self._port_of = port_of  # callable: the broker's current port
        self.topic = topic
        self.partitions = partitions
        self.requests = requests
        self.batch = batch
        self.durability = durability
        self.durability_of = durability_of  # callable(thread number) -> durability, else `durability`
        self.retry_for_s = retry_for_s
        self.acked = set()
        self.acked_by_durability = {0: set(), 1: set()}
        self.acked_requests = 0
        self.retries = 0
        self.errors = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)]

    def start(self) -> "AckedLoad":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Let each thread finish the request it is on (acknowledged or failed), then end."""
        self._stop.set()

    def join(self, timeout: float = 120) -> None:
        for thread in self._threads:
            thread.join(timeout)
            assert not thread.is_alive(), "load thread hung"
        assert not self.errors, self.errors

    def _run(self, number: int) -> None:
        client = None
        durability = self.durability_of(number) if self.durability_of else self.durability
        try:
            for request in (range(self.requests) if self.requests is not None else itertools.count()):
                if self._stop.is_set():
                    break
                ids = [f"t{number}-r{request}-m{m}".encode() for m in range(self.batch)]
                message_set = encode_message_set(ids)
                partition = (number + request) % self.partitions
                deadline = time.monotonic() + self.retry_for_s
                while True:
                    assert time.monotonic() < deadline, f"request {ids[0]!r} never acknowledged"
                    try:
                        if client is None:
                            client = WireClient(self._port_of(), timeout=20)
                        ack = client.produce_acked(self.topic, partition, message_set, durability)
                    except (ConnectionError, OSError):
                        client = None
                        self._retry()
                        continue
                    if ack.error == ErrorCode.PARTITION_UNAVAILABLE:
                        self._retry()
                        continue
                    assert ack.error == 0, f"unexpected error {ack.error}"
                    with self._lock:
                        self.acked.update(ids)
                        self.acked_by_durability[durability].update(ids)
                        self.acked_requests += 1
                    break
        except BaseException as exc:  # reported by join()
            self.errors.append(repr(exc))
        finally:
            if client is not None:
                client.close()

    def _retry(self) -> None:
        with self._lock:
            self.retries += 1
        time.sleep(0.05)

    def wait_for_acks(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_requests < count:
            assert time.monotonic() < deadline, f"only {self.acked_requests} requests acknowledged"
            assert not self.errors, self.errors
            time.sleep(0.01)


def read_everything(port: int, topic: str, partitions: int) -> list:
    """Every payload of every partition, fetched from offset 0 to the end."""
    payloads = []
    with WireClient(port) as client:
        for partition in range(partitions):
            offset = 0
            while True:
                error, data = client.fetch(topic, partition, offset, 1 << 20)
                assert error == 0, f"fetch {topic}-{partition}@{offset}: error {error}"
                messages = list(iter_messages(data, offset))
                if not messages:
                    if data:  # a partial message at a segment end cannot happen: sets never split
                        raise AssertionError(f"undecodable bytes at {topic}-{partition}@{offset}")
                    (_, ends) = client.offsets(topic, partition, -1, 1)
                    if ends and ends[0] > offset:  # the rest is in the next segment
                        offset += len(data)
                        continue
                    break
                payloads.extend(payload for _, payload in messages)
                offset = messages[-1][0]
    return payloads
