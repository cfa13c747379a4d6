"""Sync fire-and-forget requests written behind their caller (clients/core/write_behind.py,
used by Producer with acks=none): order kept and writes shared, flush and close wait for
the queue, a bounded queue blocks its caller, and a write that cannot be made is
reported by the producer's next call. Against real brokers and real sockets."""

import socket
import subprocess
import sys
import threading
import time

import pytest

from mpbroker.clients import BrokerUnavailableError, Producer
from mpbroker.clients.core.connection import BrokerConnection
from mpbroker.clients.core.write_behind import WriteBehind
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.codec import requests as rq
from mpbroker.codec.message import encode_message
from tests.clients.helpers import HOST, PARTITIONS, broker_list, read_partition, wait_for

SENDS = 5000


def frames(topic: str, payloads) -> list:
    buffers = []
    for payload in payloads:
        buffers += rq.produce_parts(topic, 0, encode_message(payload))
    return buffers


def test_requests_submitted_one_by_one_arrive_in_order_in_fewer_writes(broker):
    connection = BrokerConnection(HOST, broker.port)
    connection.connect()
    writer = WriteBehind(threading.Lock(), connection, retries=0, backoff_s=0.01)
    payloads = [b"m%05d" % i for i in range(SENDS)]
    for payload in payloads:
        writer.submit(frames("ordered", [payload]), 1)
    assert writer.flush(10)
    assert writer.writes < SENDS, "every request had a write of its own"
    wait_for(lambda: len(read_partition(broker.port, "ordered", 0)) == SENDS, what="every message")
    assert read_partition(broker.port, "ordered", 0) == payloads
    assert writer.close(5)
    connection.close()


def test_a_full_queue_blocks_its_caller_until_the_peer_reads():
    listener = socket.create_server((HOST, 0))
    connection = BrokerConnection(HOST, listener.getsockname()[1])
    connection.connect()
    peer, _ = listener.accept()  # reads nothing until told
    writer = WriteBehind(threading.Lock(), connection, retries=0, backoff_s=0.01, max_queued_bytes=64 << 10)
    chunk = b"x" * (16 << 10)
    submitted = []

    def submit_a_lot():
        for _ in range(2000):  # 32 MB: far more than the socket buffers and the queue hold
            writer.submit([chunk], 1)
            submitted.append(1)

    thread = threading.Thread(target=submit_a_lot, daemon=True)
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive(), "the queue took 32 MB without the peer reading"
    stuck_at = len(submitted)
    received = 0
    while received < 2000 * len(chunk):
        received += len(peer.recv(1 << 20))
    thread.join(10)
    assert not thread.is_alive() and stuck_at < 2000
    assert writer.flush(10) and writer.close(5)
    for sock in (peer, listener):
        sock.close()
    connection.close()


def test_producer_close_writes_what_is_queued(broker):
    producer = Producer(broker_list=broker_list(broker))
    payloads = [b"c%05d" % i for i in range(SENDS)]
    for payload in payloads:
        producer.send("closed", payload, key="k")
    assert producer.close(10)
    partition = default_partitioner("k", PARTITIONS)
    wait_for(lambda: len(read_partition(broker.port, "closed", partition)) == SENDS, what="every message")
    assert read_partition(broker.port, "closed", partition) == payloads


def stopped_after_a_send(broker) -> Producer:
    """A producer whose connection to ``broker`` is up (one message written), then the
    broker stopped: the connection does not know yet."""
    producer = Producer(broker_list=broker_list(broker), num_retries=1, retry_backoff_ms=10)
    producer.send("gone", b"first", key="k")
    assert producer.flush(10)
    broker.stop()
    return producer


def test_flush_raises_for_messages_that_could_not_be_written(broker):
    producer = stopped_after_a_send(broker)
    producer.send("gone", b"lost", key="k")  # queued: the connection still looks up
    with pytest.raises(BrokerUnavailableError, match="1 fire-and-forget message.*could not be written"):
        producer.flush(10)
    assert producer.stats.messages_failed == 1
    with pytest.raises(BrokerUnavailableError):  # the connection is down now: written inline, refused
        producer.send("gone", b"refused", key="k")
    assert producer.stats.messages_failed == 2
    producer.close()


def test_the_next_send_raises_for_messages_that_could_not_be_written(broker):
    producer = stopped_after_a_send(broker)
    producer.send("gone", b"lost", key="k")
    [writer] = producer._writers.values()
    wait_for(lambda: writer.failed == 1, what="the write to fail for good")
    with pytest.raises(BrokerUnavailableError, match="could not be written.*this call were not sent"):
        producer.send("gone", b"not sent", key="k")
    assert producer.stats.messages_failed == 2  # the lost one and the one not sent
    producer.close()


def test_a_producer_never_closed_still_has_its_queue_written_at_exit(broker):
    script = ("import sys\n"
              "from mpbroker.clients import Producer\n"
              "producer = Producer(broker_list=sys.argv[1])\n"
              f"for i in range({SENDS}):\n"
              "    producer.send('atexit', b'x%05d' % i, key='k')\n")  # no close(), no flush()
    subprocess.run([sys.executable, "-c", script, broker_list(broker)], check=True, timeout=60)
    partition = default_partitioner("k", PARTITIONS)
    wait_for(lambda: len(read_partition(broker.port, "atexit", partition)) == SENDS, what="every message")
