"""Sync fire-and-forget requests written behind their caller (clients/core/write_behind.py,
used by Producer with acks=none): order kept and writes shared, flush and close wait for
the queue, a bounded queue blocks its caller, and a write that cannot be made is
reported by the producer's next call; after a fork, on close, when dropped unclosed, on
an unexpected error, with hooks. Against real brokers and real sockets."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mpbroker.clients import BrokerUnavailableError, Producer, ProducerClosedError
from mpbroker.clients.core import write_behind
from mpbroker.clients.core.connection import BrokerConnection
from mpbroker.clients.core.write_behind import WriteBehind
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.codec import requests as rq
from mpbroker.codec.message import encode_message
from tests.clients.helpers import HOST, PARTITIONS, broker_list, paused, read_partition, wait_for

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


# --- found in review: each failed before its fix ----------------------------------------


class Observer:
    """Hooks that only watch (a producer with hooks writes inline)."""

    def __init__(self):
        self.after, self.errors = [], []

    def after_send(self, batch, results):
        self.after.append(list(batch))

    def on_error(self, batch, error):
        self.errors.append((list(batch), error))


def test_a_forked_child_sends_on_a_connection_of_its_own(broker):
    producer = Producer(broker_list=broker_list(broker))
    producer.send("forked", b"parent", key="k")
    assert producer.flush(10)
    pid = os.fork()
    if pid == 0:  # the child: its messages must arrive, written by a thread of its own
        code = 1
        try:
            for i in range(100):
                producer.send("forked", b"child-%03d" % i, key="k")
            code = 0 if producer.flush(10) and producer.close(10) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's flush timed out: nothing wrote its queue"
    producer.send("forked", b"parent again", key="k")  # the parent's connection still works
    assert producer.close(10)
    partition = default_partitioner("k", PARTITIONS)
    wait_for(lambda: len(read_partition(broker.port, "forked", partition)) == 102, what="every message")
    stored = read_partition(broker.port, "forked", partition)
    assert stored[0] == b"parent" and stored[-1] == b"parent again"
    assert sorted(stored[1:-1]) == [b"child-%03d" % i for i in range(100)]


def test_close_keeps_its_timeout_and_leaves_no_connection_behind(broker):
    producer = Producer(broker_list=broker_list(broker), socket_timeout_ms=20_000, num_retries=3)
    producer.send("stuck", b"first", key="k")
    assert producer.flush(10)
    [writer] = producer._writers.values()
    connection = writer.connection
    refused = []

    def send_a_lot():  # 40 MB: more than the socket buffers and the queue take, so it blocks
        try:
            for _ in range(40_000):
                producer.send("stuck", b"x" * 1000, key="k")
        except (BrokerUnavailableError, ProducerClosedError) as exc:
            refused.append(exc)

    with paused(broker):  # the broker reads nothing: the writer blocks once the socket buffers are full
        sender = threading.Thread(target=send_a_lot, daemon=True)
        sender.start()
        time.sleep(1.5)
        assert sender.is_alive(), "40 MB went out to a paused broker"
        started = time.monotonic()
        assert producer.close(timeout=0.5) is False
        took = time.monotonic() - started
        sender.join(5)
        assert not sender.is_alive() and refused, "a send waiting for room was not refused by the close"
    assert took < 3, f"close(timeout=0.5) took {took:.1f} s (a write blocked for socket.timeout.ms)"
    time.sleep(0.5)  # a writer that went on would reconnect now
    assert not connection.connected, "the writer made a new connection after close()"
    assert producer.stats.messages_failed > 0  # what was not written is counted


def test_a_producer_dropped_unclosed_leaves_no_thread(broker, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_EXIT_S", 0.2, raising=False)

    def writer_threads() -> int:
        return sum(thread.name.startswith("write-behind") for thread in threading.enumerate())

    before = writer_threads()
    for _ in range(5):
        producer = Producer(broker_list=broker_list(broker))
        producer.send("dropped", b"m", key="k")
        assert producer.flush(10)
        del producer
    wait_for(lambda: writer_threads() == before, timeout=5, what="the idle writer threads to end")


def test_an_unexpected_error_in_a_write_fails_its_messages_and_the_writer_goes_on(broker):
    connection = BrokerConnection(HOST, broker.port)
    connection.connect()
    writer = WriteBehind(threading.Lock(), connection, retries=0, backoff_s=0.01)
    real_send = connection.send
    connection.send = lambda *buffers: (_ for _ in ()).throw(ValueError("a bug"))
    writer.submit(frames("unexpected", [b"lost"]), 1)
    assert writer.flush(5), "the writer thread died: its queue is never done"
    failed, error = writer.take_failure()
    assert failed == 1 and "a bug" in str(error)
    connection.send = real_send
    writer.submit(frames("unexpected", [b"written"]), 1)
    assert writer.flush(5) and writer.take_failure() == (0, None)
    wait_for(lambda: read_partition(broker.port, "unexpected", 0) == [b"written"], what="the second message")
    assert writer.close(5)
    connection.close()


def test_a_producer_with_hooks_writes_inline_so_its_hooks_see_each_outcome(broker):
    observer = Observer()
    producer = Producer(broker_list=broker_list(broker), callback_handler=observer, num_retries=0)
    producer.send("hooked", b"first", key="k")
    assert producer._writers == {}, "a producer with hooks queued behind them"
    broker.stop()
    with pytest.raises(BrokerUnavailableError) as caught:
        producer.send("hooked", b"second", key="k")
    assert observer.errors == [([("hooked", "k", b"second")], caught.value)]
    assert observer.after == [[("hooked", "k", b"first")]]
    producer.close()
