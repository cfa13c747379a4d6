"""A connection paused by back-pressure, then resumed with a bad frame next, against a
real broker: only that connection is closed; the acceptor keeps its process and
serves everyone else.

A connection whose produces push a worker's outbox past its limit (max(2 x
ring.buffer.bytes, 16 MiB)) is not read until the outbox drains to half, or until the
worker dies. The frames it had sent behind the one that paused it are handled when it
is resumed; one of them may close it (malformed, or a fire-and-forget produce to the
worker that just died). The resume used to run inside the router's loop over its
paused connections, and the close removed the connection from the set being iterated:
``RuntimeError: Set changed size during iteration`` ended the acceptor, and every
connection with it.

Getting there: the worker is stopped (SIGSTOP), so its ring fills (4 records of one
~15 KB set each with the smallest ring); one connection sends sets until its outbox is
just under the limit, then, in one segment, the sets that push it over and the bad
frame, so that the acceptor receives the bad frame together with the frame that
pauses it. Then the worker goes on (SIGCONT: the outbox drains) or dies (SIGKILL:
``worker_down``).
"""

import os
import signal
import socket
import struct
import time

from mpbroker.codec import requests as rq
from mpbroker.codec.message import encode_message_set
from mpbroker.ipc import messages
from mpbroker.ownership import owner_slot
from tests.broker.wire import WireClient
from tests.polling import wait_for

from .test_protocol_fuzz import assert_broker_healthy

RING_BYTES = 65536  # the smallest ring.buffer.bytes: the ring holds only a few sets
OUTBOX_LIMIT = max(2 * RING_BYTES, 16 << 20)  # the acceptor's limit per worker outbox
TOPIC = "paused"
SET = encode_message_set([b"p" * 15000])  # one set per ring record (a record body holds < 16 KB)
MALFORMED = struct.pack(">i", -1)  # a frame size no request can have


def partition_of(slot: int) -> int:
    return next(p for p in range(4) if owner_slot(TOPIC, p, 2) == slot)


def unread_bytes(local_port: int, peer_port: int) -> int:
    """Bytes waiting in the receive queue of the broker's socket for the connection
    from ``peer_port`` (/proc/net/tcp): 0 once the acceptor has received everything."""
    local, peer = f"0100007F:{local_port:04X}", f"0100007F:{peer_port:04X}"
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2] == peer:
                return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no broker socket for the connection from port {peer_port}")


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(1 << 16):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def pause_with_frame_behind(broker, slot: int, encode, behind: bytes) -> socket.socket:
    """A connection that sent produces (``encode(partition, set)``) to the stopped worker
    ``slot`` until the acceptor paused it, with ``behind`` received right behind the
    frame that paused it. Asserts what it can see of that state."""
    partition = partition_of(slot)
    frame = encode(partition, SET)
    entry = messages.entry_bytes(TOPIC.encode(), SET)
    # The ring takes 3 to 5 sets and the outbox the rest: with this many sets the
    # outbox stays at or under the limit, and 3 more sets push it over.
    under_limit = OUTBOX_LIMIT // entry + 3
    sock = socket.create_connection(("127.0.0.1", broker.port))
    sock.sendall(frame * under_limit)
    port = sock.getsockname()[1]
    wait_for(lambda: unread_bytes(broker.port, port) == 0, timeout=10, what="the acceptor to read the sets")
    time.sleep(0.3)  # and route them
    assert not closed_within(sock, 0.2)
    last = frame * 3 + behind
    assert len(last) < 65_000, "one loopback segment, so the acceptor receives it at once"
    sock.sendall(last)
    wait_for(lambda: unread_bytes(broker.port, port) == 0, timeout=5, what="the acceptor to receive the last frames")
    assert not closed_within(sock, 0.5), "a bad frame behind the paused produce was handled: the test did not pause"
    return sock


def assert_acceptor_serves(broker, acceptor_pid: int, bystander: WireClient) -> None:
    """The bystander's connection (opened before) still works, and the acceptor is the same process."""
    try:
        assert bystander.fetch(TOPIC, partition_of(0), 0, 100)[0] == 0
        assert bystander.produce_acked("bystander", 0, encode_message_set([b"still here"]), durability=0).error == 0
    except ConnectionError as exc:
        raise AssertionError(f"the bystander lost its connection ({exc}):\n{broker.output()[-3000:]}") from exc
    status = broker.status()
    assert status["acceptor"]["pid"] == acceptor_pid and status["acceptor"]["restarts"] == 0, \
        f"the acceptor died:\n{broker.output()[-3000:]}"


def test_a_paused_connection_closed_when_the_outbox_drains(broker_factory):
    broker = broker_factory(ring_buffer_bytes=RING_BYTES)
    acceptor = broker.status()["acceptor"]["pid"]
    worker = broker.worker_pid(1)
    with WireClient(broker.port) as bystander:
        os.kill(worker, signal.SIGSTOP)
        try:
            paused = pause_with_frame_behind(broker, 1, lambda p, s: rq.encode_produce(TOPIC, p, s), MALFORMED)
        finally:
            os.kill(worker, signal.SIGCONT)  # the outbox drains: the connection is resumed, reads the bad frame
        assert closed_within(paused, 10), "the connection with the malformed frame was not closed"
        paused.close()
        assert_acceptor_serves(broker, acceptor, bystander)
    sent = (OUTBOX_LIMIT // messages.entry_bytes(TOPIC.encode(), SET) + 6) * len(SET)  # every produce before it
    broker.wait_until(lambda s: any(p["topic"] == TOPIC and p["log_end"] == sent for p in s["partitions"]),
                      what=f"{sent} bytes in {TOPIC}-{partition_of(1)}")
    assert "malformed request" in broker.output()
    assert "Set changed size" not in broker.output()
    assert_broker_healthy(broker)


def test_a_paused_connection_closed_when_its_worker_dies(broker_factory):
    # Acknowledged produces: the worker's death fails them (error 7) and resumes the
    # connection instead of closing it; the fire-and-forget produce behind them is then
    # refused, which closes it. Many answers wait meanwhile: allow them.
    broker = broker_factory(ring_buffer_bytes=RING_BYTES, max_queued_responses=5000)
    acceptor = broker.status()["acceptor"]["pid"]
    worker = broker.worker_pid(1)
    refused_produce = rq.encode_produce(TOPIC, partition_of(1), SET)
    with WireClient(broker.port) as bystander:
        os.kill(worker, signal.SIGSTOP)
        try:
            paused = pause_with_frame_behind(broker, 1, lambda p, s: rq.encode_produce_acked(0, TOPIC, p, s),
                                             refused_produce + MALFORMED)
        finally:
            os.kill(worker, signal.SIGKILL)
        assert closed_within(paused, 10), "the connection with the refused produce was not closed"
        paused.close()
        broker.wait_until(lambda s: s["workers"][1]["restarts"] == 1 and s["workers"][1]["state"] == "up",
                          what="the worker's respawn")
        assert_acceptor_serves(broker, acceptor, bystander)
    assert "fire-and-forget produce refused: worker 1 is restarting" in broker.output()
    assert "Set changed size" not in broker.output()
