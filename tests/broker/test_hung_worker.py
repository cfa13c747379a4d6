"""A worker that hangs (SIGSTOP: alive, silent) past ``worker.heartbeat.timeout.ms`` is
killed by the supervisor and respawned in its slot: a new pid, one restart counted, its
partitions back, nothing acknowledged lost. Meanwhile the rest of the broker serves:
fetches of the hung worker's partitions (from the files) and the other worker's produces."""

import os
import re
import signal
import threading
import time

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from mpbroker.ownership import owner_slot

from .wire import WireClient

HEARTBEAT_TIMEOUT_MS = 1500
TOPIC = "hung"


def partition_of(slot: int, num_workers: int = 2) -> int:
    return next(p for p in range(4) if owner_slot(TOPIC, p, num_workers) == slot)


def produce_until_acked(port: int, partition: int, message_set: bytes, timeout: float = 30.0):
    """Send PRODUCE_ACKED again after each PARTITION_UNAVAILABLE, as the producer's retries
    do; returns the first successful ack and every error seen before it."""
    errors = []
    deadline = time.monotonic() + timeout
    with WireClient(port, timeout=timeout) as client:
        while True:
            ack = client.produce_acked(TOPIC, partition, message_set)
            if ack.error == ErrorCode.NO_ERROR:
                return ack, errors
            assert ack.error == ErrorCode.PARTITION_UNAVAILABLE, ack
            errors.append(ack.error)
            assert time.monotonic() < deadline, f"still unavailable after {timeout}s"
            time.sleep(0.1)


def test_a_hung_worker_is_killed_and_respawned_and_nothing_acknowledged_is_lost(broker_factory):
    broker = broker_factory(worker_heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    hung_partition, other_partition = partition_of(0), partition_of(1)
    acknowledged = {hung_partition: [], other_partition: []}  # (offset, message set), in log order

    def produce(client, partition, payload):
        message_set = encode_message_set([payload])
        ack = client.produce_acked(TOPIC, partition, message_set)
        assert ack.error == ErrorCode.NO_ERROR, ack
        acknowledged[partition].append((ack.offset, message_set))

    with WireClient(broker.port) as client:
        for n in range(5):
            produce(client, hung_partition, b"before %d" % n)
            produce(client, other_partition, b"before %d" % n)
    before = broker.status()
    old_pid = before["workers"][0]["pid"]
    assert before["workers"][0]["restarts"] == 0

    os.kill(old_pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    waiting = {}  # a produce sent to the hung worker: answered once it is replaced
    sender = threading.Thread(target=lambda: waiting.update(
        result=produce_until_acked(broker.port, hung_partition, encode_message_set([b"sent while hung"]))))
    sender.start()
    try:
        with WireClient(broker.port) as client:
            # the broker serves on: the other worker takes produces, the hung one's data is fetched from files
            produce(client, other_partition, b"while the other hangs")
            offset, first_set = acknowledged[hung_partition][0]
            error, data = client.fetch(TOPIC, hung_partition, offset)
            assert error == ErrorCode.NO_ERROR and data.startswith(first_set)
        status = broker.wait_until(
            lambda s: s["workers"][0]["pid"] not in (None, old_pid) and s["workers"][0]["state"] == "up",
            timeout=30, what="a new worker 0")
        replaced_after = time.monotonic() - stopped_at
    finally:
        try:
            os.kill(old_pid, signal.SIGCONT)  # if it was not killed, do not leave it stopped
        except ProcessLookupError:
            pass
    sender.join(40)
    assert not sender.is_alive(), "the produce sent to the hung worker was never answered"

    worker = status["workers"][0]
    assert worker["restarts"] == 1 and worker["last_exit"] == -signal.SIGKILL
    assert status["workers"][1]["restarts"] == 0 and status["workers"][1]["pid"] == before["workers"][1]["pid"]
    assert status["acceptor"]["restarts"] == 0 and status["acceptor"]["pid"] == before["acceptor"]["pid"]
    silent = re.findall(rf"worker 0 \(pid {old_pid}\) sent no heartbeat for (\d+) ms; killing it", broker.output())
    assert len(silent) == 1, broker.output()  # once: not again at each check until the death is reaped
    assert int(silent[0]) > HEARTBEAT_TIMEOUT_MS and replaced_after >= HEARTBEAT_TIMEOUT_MS / 1000

    ack, errors = waiting["result"]
    assert errors, "the produce to the hung worker was acknowledged while it hung"
    acknowledged[hung_partition].append((ack.offset, encode_message_set([b"sent while hung"])))
    with WireClient(broker.port) as client:
        for n in range(3):  # produce and fetch work again on the respawned worker's partition
            produce(client, hung_partition, b"after %d" % n)
        for partition, sets in acknowledged.items():
            for offset, message_set in sets:  # every acknowledged set is there, where its ack said
                assert client.fetch(TOPIC, partition, offset, len(message_set)) == (0, message_set), \
                    (partition, offset)
    assert broker.stop() == 0
