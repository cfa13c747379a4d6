"""Clients that hold connections without using them, and clients that leave abruptly,
against a real broker:

- a request must arrive whole within ``request.receive.timeout.ms`` of its first byte:
  connections that send a byte now and then (slowloris) are closed, and the
  ``max.connections`` slots they held serve real clients again; a slow but complete
  request is answered, and time the broker itself is not reading (a client held back
  by ``max.queued.responses``) does not count;
- ``max.connections.per.ip`` refuses one address's connections beyond it while other
  addresses connect (127.0.0.2 reaches the loopback listener too), counts them as
  refused, frees a place when a connection closes and follows a reload;
- connections reset by their clients are logged as a burst (a line now, a count
  later), not one line each.
"""

import re
import socket
import struct
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from mpbroker.codec import requests as rq
from mpbroker.codec.framing import FrameReader
from mpbroker.codec.message import encode_message_set
from mpbroker.control_client import call
from tests.broker.wire import WireClient
from tests.polling import wait_for

from .test_hostile_clients import closed_within, raw_socket, readable
from .test_protocol_fuzz import assert_broker_healthy

FETCH = rq.encode_fetch("slow", 0, 0, 100)
EMPTY_FETCH_ANSWER = struct.pack(">h", 0)


def connect_from(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def receive_frame(sock: socket.socket, reader: FrameReader) -> bytes:
    """The next answer on ``sock``; ConnectionError if the broker closed it."""
    while (frame := reader.next_frame()) is None:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed by the broker")
        reader.feed(data)
    return frame


def served(sock: socket.socket) -> bool:
    """One fetch on ``sock`` is answered (False if the broker closed it instead)."""
    sock.settimeout(5)
    try:
        sock.sendall(FETCH)
        return receive_frame(sock, FrameReader(1 << 20)) == EMPTY_FETCH_ANSWER
    except ConnectionError:
        return False


def connect_served(address: str, port: int):
    """A connection from ``address`` that the broker serves, or None (closed)."""
    sock = connect_from(address, port)
    if served(sock):
        return sock
    sock.close()
    return None


def refused(sock: socket.socket) -> bool:
    """The broker closed ``sock`` at once, before it sent anything."""
    return closed_within(sock, 2.0)


def closed_ones(socks) -> set:
    """The sockets of ``socks`` the broker has closed by now (they are sent nothing else)."""
    closed = set()
    for sock in readable(socks, 0):
        try:
            if not sock.recv(1 << 16):
                closed.add(sock)
        except ConnectionResetError:
            closed.add(sock)
    return closed


# --------------------------------------------------------------------------------------
# request.receive.timeout.ms
# --------------------------------------------------------------------------------------


DRIPPERS = 200


def test_slow_drip_connections_are_closed_and_their_slots_serve_again(broker_factory):
    broker = broker_factory(request_receive_timeout_ms=1000, max_connections=DRIPPERS + 1)
    with WireClient(broker.port, timeout=5) as client:  # a real client, first
        drippers = [raw_socket(broker.port) for _ in range(DRIPPERS)]  # every other slot
        request = struct.pack(">i", 100) + b"\x00\x01" + bytes(98)  # 104 bytes: 20 s at 5 bytes/s
        started = time.monotonic()
        assert refused(raw_socket(broker.port)), "max.connections should be reached"
        still_open = set(drippers)
        first_closed_after = None
        sent = 0
        while still_open and time.monotonic() - started < 4.0:
            for sock in still_open:
                sock.send(request[sent:sent + 1])  # one byte each, every 0.2 s
            sent += 1
            assert client.fetch("slow", 0, 0) == (0, b""), "the real client was not served"
            time.sleep(0.2)
            closed = closed_ones(still_open)
            if closed and first_closed_after is None:
                first_closed_after = time.monotonic() - started
            still_open -= closed
        assert not still_open, f"{len(still_open)} slow-drip connections still open after 4 s"
        assert first_closed_after > 0.9, f"closed after {first_closed_after:.2f} s, before the timeout"
        with WireClient(broker.port, timeout=5) as later:  # the slots serve real clients again
            assert later.fetch("slow", 0, 0) == (0, b"")
        assert client.fetch("slow", 0, 0) == (0, b"")
    for sock in drippers:
        sock.close()
    assert re.search(r"closed \d+ connections that took more than 1000 ms to send a request "
                     r"\(request.receive.timeout.ms\)", broker.output())
    assert_broker_healthy(broker)


def test_slow_complete_requests_are_answered_and_held_back_clients_are_not_timed(broker_factory):
    broker = broker_factory(request_receive_timeout_ms=1000)
    with WireClient(broker.port, timeout=5) as slow:
        # Each request takes 400 ms to arrive (within the timeout); together they take
        # longer than the timeout: the clock is per request.
        for _ in range(4):
            for piece in (FETCH[:3], FETCH[3:10], FETCH[10:]):
                slow.send(piece)
                time.sleep(0.2)
            assert slow.receive() == EMPTY_FETCH_ANSWER
        # A request whose first bytes come with the last bytes of the one before: its
        # clock starts then (0.8 s for it, 1.4 s since the first one began).
        slow.send(FETCH[:5])
        time.sleep(0.6)
        slow.send(FETCH[5:] + FETCH[:5])
        assert slow.receive() == EMPTY_FETCH_ANSWER
        time.sleep(0.8)
        slow.send(FETCH[5:])
        assert slow.receive() == EMPTY_FETCH_ANSWER
        big_set = encode_message_set([b"b" * 10_000])
        assert slow.produce_acked("big", 0, big_set).error == 0
    # 1500 fetches of 10 KB and half of one more, answers not read: the socket buffers
    # fill, the broker stops reading it (max.queued.responses), and its clock stops.
    greedy = raw_socket(broker.port, receive_buffer=4096)
    fetch_big = rq.encode_fetch("big", 0, 0, 1 << 20)
    greedy.sendall(fetch_big * 1500 + fetch_big[:7])
    time.sleep(2.0)  # not reading: a close now would show as a missing answer below
    greedy.settimeout(10)
    reader = FrameReader(1 << 20)
    for _ in range(1500):
        assert receive_frame(greedy, reader) == EMPTY_FETCH_ANSWER + big_set
    time.sleep(0.4)  # the clock started again when the broker read on: within the timeout still
    greedy.sendall(fetch_big[7:])
    assert receive_frame(greedy, reader) == EMPTY_FETCH_ANSWER + big_set
    greedy.close()
    assert "request.receive.timeout.ms" not in broker.output()
    assert_broker_healthy(broker)


# --------------------------------------------------------------------------------------
# max.connections.per.ip
# --------------------------------------------------------------------------------------


def refused_total(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return next(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == "mpbroker_connections_refused_total")


def test_max_connections_per_ip(broker_factory):
    broker = broker_factory(max_connections_per_ip=3, metrics_enable="true", metrics_port=0)
    metrics_port = broker.wait_until(lambda s: s["metrics"]["state"] == "up", what="the exporter")["metrics"]["port"]
    local = [connect_from("127.0.0.1", broker.port) for _ in range(3)]
    assert all(served(sock) for sock in local)
    extra = connect_from("127.0.0.1", broker.port)
    assert refused(extra), "a 4th connection from 127.0.0.1 was kept (max.connections.per.ip=3)"
    others = [connect_from("127.0.0.2", broker.port) for _ in range(3)]
    assert all(served(sock) for sock in others), "another address was refused"
    assert all(served(sock) for sock in local)
    assert refused_total(metrics_port) == 1
    local.pop().close()  # a place comes free
    local.append(wait_for(lambda: connect_served("127.0.0.1", broker.port), timeout=5,
                          what="a connection in the freed place"))
    assert refused(connect_from("127.0.0.1", broker.port))
    broker.properties["max.connections.per.ip"] = "5"  # a reload raises the limit
    broker.write_config()
    assert "max.connections.per.ip" in call(broker.socket_path, "reload")["applied"]
    local.append(wait_for(lambda: connect_served("127.0.0.1", broker.port), timeout=5,
                          what="a 4th connection after the reload"))
    local.append(connect_from("127.0.0.1", broker.port))
    assert served(local[-1])
    assert refused(connect_from("127.0.0.1", broker.port))
    for sock in local + others + [extra]:
        sock.close()
    assert "connections from 127.0.0.1 already (max.connections.per.ip)" in broker.output()
    assert_broker_healthy(broker)


# --------------------------------------------------------------------------------------
# Resets
# --------------------------------------------------------------------------------------

RESETS = 500


def reset_lines(output: str) -> list:
    return [line for line in output.splitlines() if "Connection reset by peer" in line]


def resets_logged(output: str) -> int:
    """Resets the log accounts for: one per line, plus the counts the lines give."""
    lines = reset_lines(output)
    return len(lines) + sum(int(m.group(1)) for line in lines if (m := re.search(r"and (\d+) more like it", line)))


def test_connection_resets_are_logged_as_a_burst_with_a_count(broker):
    with WireClient(broker.port) as bystander:
        for _ in range(RESETS):
            sock = raw_socket(broker.port)
            sock.sendall(FETCH)
            assert readable([sock], 5), "not answered"  # accepted and served: the broker holds it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST
        assert bystander.fetch("slow", 0, 0) == (0, b"")
        wait_for(lambda: reset_lines(broker.output()), timeout=5, what="the first reset's line")
        time.sleep(0.5)  # the broker has seen every reset (they arrived before the bystander's fetch)
        assert len(reset_lines(broker.output())) <= 2, "\n".join(reset_lines(broker.output())[:5])
        # The count comes once the 10 s interval has passed, without waiting for another reset.
        wait_for(lambda: resets_logged(broker.output()) == RESETS, timeout=15,
                 what=f"the count of {RESETS} resets", detail=lambda: "\n".join(reset_lines(broker.output())))
        assert len(reset_lines(broker.output())) <= 3
        assert bystander.fetch("slow", 0, 0) == (0, b"")
    assert_broker_healthy(broker)
