"""A workload against a ``NetCluster``'s replicated topic, recorded in a ``History``.

``Workload`` (a context manager) runs producer threads and consumer threads while the
caller applies faults; its exit stops them. ``finish(history)``, after the caller
healed the network, waits until every partition has its full ISR and its leader's
high watermark equals its log end, then records the final full read of each partition
from its leader and each replica's log bytes with the leader's high watermark.

Producers: each sends one request at a time (so acknowledgement order is send order,
as the checker's order check assumes), each request a few unique payloads
``b"p<producer>-<seq>-<i>"``, to the partitions in turn, to the leader ZooKeeper names
at that moment. Every request is recorded before it is sent (``begin_produce``) and
after (``produce_answered``/``produce_exception``). After an error the producer waits a
little; one producer with durability 2 sends a set whose outcome is indeterminate (a
timeout, a reset, NOT_LEADER...) again, to whatever broker leads then, up to
``retries`` times (each retry recorded with ``retry_of``, as Kafka's producer retries:
the duplicates this may store are the checker's "explained" ones); the others go on
with new payloads.

Consumers: one per partition, fetching from the current leader from where it left
off, recording every message (``record_fetch``). A consumer that is cut off times out
and asks ZooKeeper again.
"""

import threading
import time

from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message_set import decode_messages
from tests.replication import cluster as replicated

from .cluster import BROKER_PORT
from .history import History
from .threads import WorkloadThreads

# (name, durability, retries): three producers with durability 2 (one retrying), one with
# 1, one with 0.
PRODUCERS = (("p1", 2, 0), ("p2", 2, 0), ("p3", 2, 5), ("p4", 1, 0), ("p5", 0, 0))
PAYLOADS_PER_REQUEST = 3
SOCKET_TIMEOUT = 2.0
ERROR_PAUSE = 0.05
FETCH_SIZE = 1 << 16


class Workload:
    def __init__(self, cluster, history: History, topic: str, partitions: int = 2, producers=PRODUCERS,
                 payloads_per_request: int = PAYLOADS_PER_REQUEST, timeout: float = SOCKET_TIMEOUT):
        self.cluster = cluster
        self.history = history
        self.topic = topic
        self.partitions = tuple(range(partitions))
        self.producers = tuple(producers)
        self.payloads_per_request = payloads_per_request
        self.timeout = timeout
        self._stop = threading.Event()
        self._threads = WorkloadThreads()

    # --- life cycle -------------------------------------------------------------------

    def start(self) -> "Workload":
        for index, (name, durability, retries) in enumerate(self.producers):
            self._threads.spawn(f"producer-{name}", self._produce_loop, name, durability, retries, index)
        for partition in self.partitions:
            self._threads.spawn(f"consumer-{partition}", self._consume_loop, f"c{partition}", partition)
        return self

    def stop(self) -> None:
        self._stop.set()
        alive = self._threads.join(self.timeout * 3 + 5)
        assert not alive, f"workload threads still running: {alive}"

    @property
    def errors(self) -> list:
        """Unexpected exceptions of the threads themselves (bugs), not of requests."""
        return self._threads.errors

    def __enter__(self) -> "Workload":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _leader(self, partition: int):
        """``(leader id, (host, port))``, or ``(id or None, None)`` while none is reachable."""
        try:
            return replicated.leader_address(self.cluster.client, self.cluster.brokers, self.topic, partition)
        except Exception:  # noqa: BLE001 - ZooKeeper unreachable for a moment: no leader known
            return None, None

    # --- producers --------------------------------------------------------------------

    def _produce_loop(self, name, durability: int, retries: int, index: int) -> None:
        sequence = 0
        while not self._stop.is_set():
            partition = self.partitions[(sequence + index) % len(self.partitions)]
            payloads = [f"{name}-{sequence}-{i}".encode() for i in range(self.payloads_per_request)]
            sequence += 1
            previous = None
            for _ in range(retries + 1):
                outcome, previous = self._send(name, durability, partition, payloads, previous)
                if outcome in ("ok", "failed") or self._stop.is_set():
                    break

    def _send(self, name, durability: int, partition: int, payloads, retry_of) -> tuple:
        """One attempt to the current leader: ``(outcome, attempt id)``; ``(None,
        retry_of)`` if no leader was reachable (nothing sent)."""
        leader, address = self._leader(partition)
        while address is None:
            if self._stop.is_set():
                return None, retry_of
            time.sleep(ERROR_PAUSE)
            leader, address = self._leader(partition)
        attempt = self.history.begin_produce(name, self.topic, partition, durability, payloads, broker=leader,
                                             retry_of=retry_of)
        try:
            # Durability 0 is answered right after the append, 1 after the flush, 2
            # once the high watermark covers the set.
            ack = replicated.produce(address[1], self.topic, partition, payloads, durability, self.timeout,
                                     address[0])
        except Exception as exc:  # noqa: BLE001 - every failure of the request is indeterminate
            self.history.produce_exception(attempt, exc)
            time.sleep(ERROR_PAUSE)
            return "indeterminate", attempt
        outcome = self.history.produce_answered(attempt, ack)
        if outcome != "ok":
            time.sleep(ERROR_PAUSE)
        return outcome, attempt

    # --- consumers --------------------------------------------------------------------

    def _consume_loop(self, name, partition: int) -> None:
        offset = 0
        while not self._stop.is_set():
            leader, address = self._leader(partition)
            if address is None:
                time.sleep(ERROR_PAUSE)
                continue
            try:
                frame = rq.encode_fetch(self.topic, partition, offset, FETCH_SIZE)
                body = replicated.round_trip(address[1], frame, self.timeout, address[0])
                error, data = responses.split_error(body)
            except Exception:  # noqa: BLE001 - cut off or restarting: ask ZooKeeper again
                time.sleep(ERROR_PAUSE)
                continue
            if error != ErrorCode.NO_ERROR:
                time.sleep(ERROR_PAUSE)
                continue
            payloads, next_offsets, _ = decode_messages(bytes(data), offset)
            if not payloads:
                time.sleep(0.02)
                continue
            self.history.record_fetch(name, self.topic, partition, offset, payloads, next_offsets, broker=leader,
                                      role="leader")
            offset = next_offsets[-1]

    # --- after the heal ---------------------------------------------------------------

    def partition_status(self, broker_id: int, partition: int):
        """The broker's status row of the partition, or None."""
        status = self.cluster.brokers[broker_id].try_status()
        for row in (status or {}).get("partitions", ()):
            if row["topic"] == self.topic and row["partition"] == partition:
                return row
        return None

    def wait_settled(self, partition: int, timeout: float = 60.0):
        """Wait until the partition's ISR is every broker, its leader's high watermark is
        its log end, and every replica holds that much on disk: ``(leader, leader's row)``."""
        deadline = time.monotonic() + timeout
        wanted = set(self.cluster.broker_ids)
        last = None
        while time.monotonic() < deadline:
            leader = self.cluster.leader(self.topic, partition)
            isr = set(self.cluster.isr(self.topic, partition))
            row = self.partition_status(leader, partition) if leader is not None else None
            last = (leader, sorted(isr), row)
            if isr == wanted and row is not None and row.get("role") == "leader" \
                    and row["high_watermark"] == row["log_end"]:
                ends = [replicated_end(self.cluster.brokers[b], self.topic, partition) for b in wanted]
                if all(end >= row["high_watermark"] for end in ends):
                    return leader, row
            time.sleep(0.1)
        raise AssertionError(f"{self.topic}-{partition} not settled after {timeout}s: leader, ISR, leader's row "
                             f"{last}\n{self.cluster.log_tails()}")

    def finish(self, history: History | None = None, timeout: float = 60.0) -> None:
        """Record every partition's final read and replica logs (after the heal)."""
        history = self.history if history is None else history
        for partition in self.partitions:
            leader, row = self.wait_settled(partition, timeout)
            broker = self.cluster.brokers[leader]
            start = row.get("log_start") or 0
            payloads, next_offsets = read_from(broker.host, self.topic, partition, start, row["high_watermark"])
            history.record_final_messages(self.topic, partition, leader, start, payloads, next_offsets)
            high_watermark = row["high_watermark"]
            for broker_id, replica in self.cluster.brokers.items():
                history.record_replica_log(self.topic, partition, broker_id,
                                           replicated.log_bytes(replica, self.topic, partition), high_watermark,
                                           role="leader" if broker_id == leader else "follower")


def replicated_end(broker, topic: str, partition: int) -> int:
    """How many bytes of the partition the broker holds on disk."""
    return len(replicated.log_bytes(broker, topic, partition))


def read_from(host: str, topic: str, partition: int, start: int, end: int) -> tuple:
    """``(payloads, next_offsets)`` of every message from ``start`` up to ``end``."""
    payloads, next_offsets = [], []
    offset = start
    while offset < end:
        frame = rq.encode_fetch(topic, partition, offset, 1 << 20)
        error, data = responses.split_error(replicated.round_trip(BROKER_PORT, frame, 10.0, host))
        assert error == ErrorCode.NO_ERROR, f"final read of {topic}-{partition} at {offset}: error {error}"
        found, ends, _ = decode_messages(bytes(data), offset)
        assert found, f"final read of {topic}-{partition}: nothing at {offset}, below {end}"
        payloads += found
        next_offsets += ends
        offset = ends[-1]
    return payloads, next_offsets
