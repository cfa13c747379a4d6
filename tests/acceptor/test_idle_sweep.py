"""Which connections the acceptor's sweep closes as idle (mpbroker/acceptor/limits.py):
none the broker owes an answer, including one a worker has just answered whose answer
is not sent yet (the sweep's timer can fire in the round of events that made it ready,
before the sends), and one whose answer is queued for output but not yet taken by the
socket (its idle clock starts when the answer is queued, not at the last byte before the
wait); one whose client stopped reading its answers, once no byte moved for
``connections.max.idle.ms``. On real connections over a socketpair."""

import socket

from mpbroker.acceptor.limits import overdue

IDLE_MS = 300
RECEIVE_TIMEOUT_MS = 30_000
LONG_AFTER = 10.0  # seconds: far past IDLE_MS since the connection was made at 0.0


class RoomLater:
    """A socket whose first ``sendmsg`` finds no room (``BlockingIOError``: the kernel
    takes the bytes a moment later); then the real socket."""

    def __init__(self, sock):
        self._sock = sock
        self._refused = False

    def sendmsg(self, *args):
        if not self._refused:
            self._refused = True
            raise BlockingIOError
        return self._sock.sendmsg(*args)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def idle_at(connection, now: float) -> bool:
    idle, _slow = overdue([connection], now, IDLE_MS, RECEIVE_TIMEOUT_MS)
    return connection in idle


def test_a_connection_nothing_moved_on_is_idle(pair):
    connection, _ = pair
    assert not idle_at(connection, 0.2)
    assert idle_at(connection, LONG_AFTER)


def test_an_answer_a_worker_owes_keeps_the_connection(pair):
    connection, _ = pair
    connection.reserve()
    assert not idle_at(connection, LONG_AFTER)


def test_an_answer_ready_but_not_yet_sent_keeps_the_connection(pair):
    connection, client = pair
    response = connection.reserve()
    response.fill([b"the worker's answer"])  # a worker answered in this round of events
    assert not idle_at(connection, LONG_AFTER)  # the sweep before the sends: not idle

    assert connection.send(LONG_AFTER) is True
    assert client.recv(100) == b"the worker's answer"
    assert not idle_at(connection, LONG_AFTER + 0.1)
    assert idle_at(connection, LONG_AFTER + 1.0)  # idle after its answer went out


def test_an_answer_queued_for_output_after_a_long_wait_keeps_the_connection(pair):
    """The ordering: a request at 0.0 (its last byte moved), the worker answers at
    LONG_AFTER, the send hands the answer to the output queue but the socket takes none
    of it yet, and the sweep runs before the socket has room. The client was kept
    waiting by the broker all along: not idle."""
    connection, client = pair
    response = connection.reserve()  # the request at 0.0: the worker owes its answer
    assert not idle_at(connection, LONG_AFTER)  # owed: not idle however long
    response.fill([b"the worker's answer"])
    connection.sock = RoomLater(connection.sock)
    assert connection.send(LONG_AFTER) is False  # queued for output, nothing sent yet
    assert not connection.responses and connection.output
    assert not idle_at(connection, LONG_AFTER + 0.1)  # the sweep before the socket has room

    assert connection.send(LONG_AFTER + 0.2) is True
    assert client.recv(100) == b"the worker's answer"
    assert idle_at(connection, LONG_AFTER + 1.0)  # idle once its answer went out


def test_a_client_that_stops_reading_its_answers_becomes_idle(pair):
    connection, _ = pair
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connection.respond([b"x" * (8 << 20)])  # more than the socket buffers take
    assert connection.send(0.1) is False  # some went out, the rest waits for the client
    assert not idle_at(connection, 0.2)
    assert idle_at(connection, LONG_AFTER)  # no byte moved since: the client is gone
