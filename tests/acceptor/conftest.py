"""Fixtures of the acceptor's unit tests."""

import socket

import pytest

from mpbroker.acceptor.connection import Connection
from mpbroker.codec.framing import READ_CHUNK
from mpbroker.ipc.counters import ROW_WORDS


@pytest.fixture
def pair():
    """A connection on one end of a socketpair (made at time 0.0), and the client's end."""
    ours, client = socket.socketpair()
    ours.setblocking(False)
    connection = Connection(ours, "client", 1 << 20, 1, [0] * ROW_WORDS, bytearray(READ_CHUNK), 0.0)
    yield connection, client
    connection.close()
    client.close()
