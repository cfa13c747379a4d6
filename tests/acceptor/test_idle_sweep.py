"""Which connections the acceptor's sweep closes as idle (mpbroker/acceptor/limits.py):
none the broker owes an answer, including one a worker has just answered whose answer
is not sent yet (the sweep's timer can fire in the round of events that made it ready,
before the sends); one whose client stopped reading its answers, once no byte moved for
``connections.max.idle.ms``. On real connections over a socketpair."""

import socket

from mpbroker.acceptor.limits import overdue

IDLE_MS = 300
RECEIVE_TIMEOUT_MS = 30_000
LONG_AFTER = 10.0  # seconds: far past IDLE_MS since the connection was made at 0.0


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


def test_a_client_that_stops_reading_its_answers_becomes_idle(pair):
    connection, _ = pair
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connection.respond([b"x" * (8 << 20)])  # more than the socket buffers take
    assert connection.send(0.1) is False  # some went out, the rest waits for the client
    assert not idle_at(connection, 0.2)
    assert idle_at(connection, LONG_AFTER)  # no byte moved since: the client is gone
