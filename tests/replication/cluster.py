"""Three real brokers on a real ZooKeeper for the replication tests, and a raw wire
client: produce with a durability, fetch, OFFSETS, each a round trip on a socket of
its own (retrying the leader lookup the way a client does). The wire helpers take the
broker's ``host`` (127.0.0.1 unless the brokers run elsewhere, as in
``tests/faults/netcluster/``, where each has an address of its own); the leader lookups
use the host the leader registered."""

import os
import threading
import time

from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message
from mpbroker.codec.message_set import decode_messages
from mpbroker.registry import layout, replication
from mpbroker.segments.naming import list_segment_bases, partition_dir_name, segment_file_name
from tests.broker.wire import WireClient

BROKER_IDS = (1, 2, 3)
SESSION_MS = 4000


def start_cluster(broker_factory, zk_connect, **properties) -> dict:
    settings = {"enable_zookeeper": "true", "zk_connect": zk_connect, "zk_sessiontimeout_ms": SESSION_MS,
                "replica_lag_time_max_ms": 3000, **properties}
    return {i: broker_factory(f"b{i}", brokerid=i, **settings) for i in BROKER_IDS}


def round_trip(port: int, frame: bytes, timeout: float = 10.0, host: str = "127.0.0.1") -> bytes:
    """One request on a new connection: the answer's body."""
    with WireClient(port, timeout, host) as client:
        return client.request(frame)


def state(client, topic: str, partition: int):
    try:
        value, _ = client.get(replication.partition_state_path(topic, partition))
    except Exception:  # noqa: BLE001 - not written yet
        return None
    return replication.parse_partition_state(topic, partition, value)


def leader_port(client, brokers: dict, topic: str, partition: int):
    """``(leader id, port)``; the port is None while the leader is not running or registered."""
    leader, address = leader_address(client, brokers, topic, partition)
    return leader, address and address[1]


def leader_address(client, brokers: dict, topic: str, partition: int):
    """``(leader id, (host, port))`` as the leader registered them; the address is None
    while the leader is not running or registered (the id None while there is none)."""
    found = state(client, topic, partition)
    if found is None or found.leader == replication.NO_LEADER:
        return None, None
    broker = brokers.get(found.leader)
    if broker is None or broker.process is None or broker.process.poll() is not None:
        return found.leader, None
    try:
        value, _ = client.get(layout.broker_path(found.leader))
    except Exception:  # noqa: BLE001 - not registered (yet)
        return found.leader, None
    info = layout.parse_broker(found.leader, value)
    return found.leader, (info.host, info.port)


def message_set(payloads) -> bytes:
    return b"".join(encode_message(payload) for payload in payloads)


def produce(port: int, topic: str, partition: int, payloads, durability: int = 2, timeout: float = 10.0,
            host: str = "127.0.0.1"):
    """The broker's ProduceAck (error, partition, offset, next offset)."""
    frame = rq.encode_produce_acked(durability, topic, partition, message_set(payloads))
    body = round_trip(port, frame, timeout, host)
    return responses.decode_produce_ack(body)


def produce_until_acked(client, brokers, topic: str, partition: int, payloads, timeout: float = 30.0,
                        durability: int = 2, attempt_timeout: float = 10.0):
    """Produce to the current leader until it acknowledges: ``(leader id, ack)``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        leader, address = leader_address(client, brokers, topic, partition)
        if address is not None:
            host, port = address
            try:
                ack = produce(port, topic, partition, payloads, durability, attempt_timeout, host)
                if ack.error == ErrorCode.NO_ERROR:
                    return leader, ack
                last = ack
            except OSError as exc:
                last = exc
        time.sleep(0.05)
    raise AssertionError(f"no acknowledgement of {topic}-{partition} within {timeout}s; last: {last}")


def read_all(port: int, topic: str, partition: int, host: str = "127.0.0.1") -> list:
    """Every payload the broker shows a consumer of the partition, in order."""
    payloads = []
    offset = 0
    while True:
        frame = rq.encode_fetch(topic, partition, offset, 1 << 20)
        error, data = responses.split_error(round_trip(port, frame, host=host))
        assert error == ErrorCode.NO_ERROR, f"fetch at {offset}: error {error}"
        found, next_offsets, _ = decode_messages(bytes(data), offset)
        if not found:
            return payloads
        payloads += found
        offset = next_offsets[-1]


def log_bytes(broker, topic: str, partition: int) -> bytes:
    """The partition's log as this broker holds it on disk, from its first segment on."""
    directory = os.path.join(broker.log_dir, partition_dir_name(topic, partition))
    data = bytearray()
    for base in list_segment_bases(directory):
        with open(os.path.join(directory, segment_file_name(base)), "rb") as file:
            data += file.read()
    return bytes(data)


class Load:
    """Producers of unique payloads with durability 2 to whichever broker leads;
    a produce that fails is not retried (its payloads are never counted as acknowledged)."""

    def __init__(self, client, brokers, topic: str, partition: int = 0):
        self.client, self.brokers, self.topic, self.partition = client, brokers, topic, partition
        self.acked = []  # payloads, in the order of their acknowledgements
        self.ack_times = []  # (monotonic time, leader)
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sequence = 0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            leader, address = leader_address(self.client, self.brokers, self.topic, self.partition)
            if address is None:
                time.sleep(0.02)
                continue
            payloads = [f"{self._sequence}-{i}".encode() for i in range(5)]
            self._sequence += 1
            try:
                ack = produce(address[1], self.topic, self.partition, payloads, timeout=3.0, host=address[0])
            except OSError as exc:
                self.errors.append(repr(exc))
                time.sleep(0.02)
                continue
            if ack.error == ErrorCode.NO_ERROR:
                self.acked += payloads
                self.ack_times.append((time.monotonic(), leader))
            else:
                self.errors.append(ack.error)
                time.sleep(0.02)


def check_read_back(port: int, topic: str, acked: list, partition: int = 0, host: str = "127.0.0.1") -> list:
    """Every acknowledged payload is read back once, in order: the payloads read."""
    read = read_all(port, topic, partition, host)
    positions = {payload: index for index, payload in enumerate(read)}
    assert len(positions) == len(read), "a payload was read twice"
    missing = [payload for payload in acked if payload not in positions]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    order = [positions[payload] for payload in acked]
    assert order == sorted(order), "acknowledged messages read back out of order"
    return read


def wait_identical(brokers, topic: str, partition: int = 0, timeout: float = 30.0) -> bytes:
    """Wait until these brokers hold the same bytes of the partition; return them."""
    deadline = time.monotonic() + timeout
    while True:
        logs = [log_bytes(broker, topic, partition) for broker in brokers]
        if all(data == logs[0] for data in logs):
            return logs[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"replicas differ after {timeout}s: lengths {[len(data) for data in logs]}")
        time.sleep(0.1)
