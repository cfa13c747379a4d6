"""A connection owns its state (mpbroker/acceptor/connection.py): pause and unpause (by
the router), throttle at ``max.queued.responses`` and read again at half, waiting for
the socket to take a send, begin closing, and the selector events that follow from
them (``interest``); a closed connection ignores every transition. On real sockets (a
socketpair), with the real router and rings for pausing."""

import os
import struct
from selectors import EVENT_READ, EVENT_WRITE

import pytest

from mpbroker.acceptor.connection import CLOSE, NEW_INTEREST, NOTHING, READ_AGAIN
from mpbroker.acceptor.routing import Router, WorkerRoute
from mpbroker.ipc.counters import BYTES_SENT
from mpbroker.ipc.messages import Mode
from mpbroker.ipc.ring import Ring

NOT_STOPPING = False


class Answering:
    """Request handlers that answer each frame at once (as a fetch is answered)."""

    def __init__(self):
        self.frames = []

    def handle(self, connection, frame) -> None:
        self.frames.append(frame)
        connection.respond([b"answer to " + frame])


class Reserving:
    """Request handlers whose answers wait for a worker (as an acknowledged produce's do)."""

    def __init__(self):
        self.responses = []

    def handle(self, connection, frame) -> None:
        self.responses.append(connection.reserve())


def frame(number: int) -> bytes:
    body = struct.pack(">hi", 0, number)  # a request type, then anything
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def route():
    route = WorkerRoute(0, Ring(4096), Ring(4096), outbox_limit=100)
    yield route
    for ring in (route.requests, route.answers):
        os.close(ring.data_fd)
        os.close(ring.space_fd)


def receive_frames(connection, client, count: int) -> None:
    client.sendall(b"".join(frame(number) for number in range(count)))
    assert connection.receive(1.0) > 0


def drain(client) -> int:
    """Read whatever the connection sent; the byte count."""
    client.setblocking(False)
    total = 0
    try:
        while chunk := client.recv(1 << 20):
            total += len(chunk)
    except BlockingIOError:
        pass
    return total


# --- interest ---------------------------------------------------------------------


def test_a_new_connection_is_read_and_waits_for_no_send(pair):
    connection, _ = pair
    assert connection.interest(NOT_STOPPING) == EVENT_READ
    assert connection.interest(stopping=True) == 0
    assert not (connection.paused or connection.throttled or connection.closing or connection.wants_write)


# --- pause ------------------------------------------------------------------------


def test_a_paused_connection_is_not_read_until_unpaused(pair):
    connection, client = pair
    assert connection.pause() is True
    assert connection.pause() is False  # paused already: the router keeps it once
    assert connection.paused and connection.owed_answer
    assert connection.interest(NOT_STOPPING) & EVENT_READ == 0

    receive_frames(connection, client, 2)
    handlers = Answering()
    assert connection.handle_frames(handlers, max_queued=10) is True  # held: apply its interest
    assert handlers.frames == []

    connection.unpause()
    assert not connection.paused
    assert connection.interest(NOT_STOPPING) == EVENT_READ
    assert connection.handle_frames(handlers, max_queued=10) is False
    assert len(handlers.frames) == 2


def test_the_router_pauses_the_connection_that_fills_a_worker_queue_and_hands_it_back(pair, route):
    connection, _ = pair
    router = Router([route], incarnation=1)
    router.worker_up(route)
    router.produce(connection, b"topic", 0, Mode.FIRE_AND_FORGET, b"x" * 50, route)
    assert not connection.paused  # under the outbox's limit
    router.produce(connection, b"topic", 0, Mode.FIRE_AND_FORGET, b"x" * 100, route)
    assert connection.paused and route.paused == {connection}
    assert connection.interest(NOT_STOPPING) & EVENT_READ == 0

    assert router.flush_outboxes() == [connection]  # the ring took everything: read it again
    assert not connection.paused and route.paused == set()
    assert connection.interest(NOT_STOPPING) == EVENT_READ


def test_a_dead_worker_hands_back_its_paused_connections_unpaused(pair, route):
    connection, _ = pair
    router = Router([route], incarnation=1)
    router.worker_up(route)
    router.produce(connection, b"topic", 0, Mode.FIRE_AND_FORGET, b"x" * 200, route)
    assert connection.paused

    outcome = router.worker_down(route)
    assert outcome.to_resume == [connection] and not connection.paused
    assert [closing for closing, _ in outcome.to_close] == [connection]  # its produce died in flight


# --- throttle ---------------------------------------------------------------------


def test_throttled_at_max_queued_answers_and_read_again_at_half(pair):
    connection, client = pair
    handlers = Reserving()
    receive_frames(connection, client, 6)
    assert connection.handle_frames(handlers, max_queued=4) is True
    assert len(handlers.responses) == 4 and connection.queued == 4
    assert connection.throttled and connection.interest(NOT_STOPPING) & EVENT_READ == 0

    handlers.responses[0].fill([b"first"])
    assert connection.send(2.0) is True and connection.queued == 3
    assert connection.after_send(True, max_queued=4) == NOTHING  # 3 wait: still throttled
    assert connection.throttled

    handlers.responses[1].fill([b"second"])
    assert connection.send(3.0) is True and connection.queued == 2
    assert connection.after_send(True, max_queued=4) == READ_AGAIN
    assert not connection.throttled and connection.interest(NOT_STOPPING) == EVENT_READ
    assert connection.handle_frames(handlers, max_queued=4) is True  # two more frames, four queued again
    assert len(handlers.responses) == 6 and connection.throttled


def test_not_throttled_below_max_queued(pair):
    connection, client = pair
    receive_frames(connection, client, 3)
    assert connection.handle_frames(Reserving(), max_queued=4) is False
    assert not connection.throttled and connection.interest(NOT_STOPPING) == EVENT_READ


# --- waiting for the socket --------------------------------------------------------


def test_a_send_the_socket_cannot_take_waits_for_write_interest(pair):
    connection, client = pair
    connection.respond([b"y" * (8 << 20)])  # more than a socketpair buffers
    done = connection.send(1.0)
    assert done is False
    assert connection.after_send(done, max_queued=1) == NEW_INTEREST
    assert connection.wants_write and connection.interest(NOT_STOPPING) == EVENT_READ | EVENT_WRITE
    assert connection.after_send(done, max_queued=1) == NOTHING  # no change: the selector has it

    received = drain(client)
    while not (done := connection.send(2.0)):
        received += drain(client)
    received += drain(client)
    assert received == 8 << 20 == connection.counters[BYTES_SENT]
    assert connection.after_send(done, max_queued=1) == NEW_INTEREST
    assert not connection.wants_write and connection.interest(NOT_STOPPING) == EVENT_READ


# --- closing ----------------------------------------------------------------------


def test_begin_closing_stops_reading_and_closes_once_the_answers_are_out(pair):
    connection, client = pair
    waiting = connection.reserve()
    connection.begin_closing()
    assert connection.closing and connection.interest(NOT_STOPPING) == 0

    assert connection.send(1.0) is True
    assert connection.after_send(True, max_queued=1) == NOTHING  # an answer still waits for a worker
    waiting.fill([b"last"])
    assert connection.send(2.0) is True
    assert connection.after_send(True, max_queued=1) == CLOSE
    assert drain(client) == len(b"last")


def test_a_closed_connection_ignores_transitions(pair, route):
    connection, client = pair
    receive_frames(connection, client, 1)
    connection.close()

    assert connection.pause() is False and not connection.paused
    connection.begin_closing()
    assert not connection.closing
    connection.unpause()
    handlers = Answering()
    assert connection.handle_frames(handlers, max_queued=0) is False  # not even throttled
    assert handlers.frames == [] and not connection.throttled
    assert connection.after_send(True, max_queued=1) == NOTHING
    assert connection.interest(NOT_STOPPING) == 0

    router = Router([route], incarnation=1)
    router.worker_up(route)
    router.produce(connection, b"topic", 0, Mode.FIRE_AND_FORGET, b"x" * 200, route)
    assert route.paused == set()  # nothing for the router to hand back


def test_a_connection_closed_while_paused_or_throttled_is_not_read_again(pair):
    connection, client = pair
    receive_frames(connection, client, 2)
    assert connection.handle_frames(Reserving(), max_queued=1) is True
    connection.pause()
    connection.close()

    connection.unpause()
    assert connection.after_send(True, max_queued=2) == NOTHING  # not READ_AGAIN
    assert connection.paused and connection.throttled and connection.interest(NOT_STOPPING) == 0


# --- activity ---------------------------------------------------------------------


def test_last_active_moves_only_when_bytes_move(pair):
    connection, client = pair
    assert connection.last_active == 0.0
    assert connection.receive(5.0) == -1  # nothing there
    assert connection.last_active == 0.0
    receive_frames(connection, client, 1)
    assert connection.last_active == 1.0

    assert connection.send(6.0) is True  # nothing to send
    assert connection.last_active == 1.0
    connection.respond([b"answer"])
    assert connection.send(7.0) is True
    assert connection.last_active == 7.0

    drain(client)
    client.close()
    assert connection.receive(8.0) == 0  # the client left
    assert connection.last_active == 7.0
