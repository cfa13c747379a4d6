"""A connection's output of fetched file ranges: sent with sendfile in order with the
byte buffers around them, resumed where a partial send stopped, and each range's
reference on its segment file given back once sent or when the connection closes."""

import os
import socket
import time

from mpbroker.acceptor.connection import Connection
from mpbroker.acceptor.segment_files import SegmentFile
from mpbroker.ipc.counters import BYTES_SENT
from mpbroker.segments import FileRange

DATA = os.urandom(3 << 20)


def segment_file(tmp_path) -> SegmentFile:
    path = tmp_path / "00000000000000000000.kafka"
    path.write_bytes(DATA)
    return SegmentFile(os.open(path, os.O_RDONLY))


def held(file, position: int, length: int) -> FileRange:
    file.acquire()  # as the request handlers do for an answer's range
    return FileRange(file, position, length)


def connection_pair():
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    ours.setblocking(False)
    counters = [0] * 16
    return Connection(ours, "peer", 1 << 20, 1, counters, bytearray(1 << 16), time.monotonic()), theirs, counters


def test_ranges_go_out_in_order_across_partial_sends(tmp_path):
    file = segment_file(tmp_path)
    connection, peer, counters = connection_pair()
    connection.respond([b"head", held(file, 5, 2 << 20), b"middle", held(file, 1000, 700_000)])
    connection.respond([b"tail"])
    expected = b"head" + DATA[5:5 + (2 << 20)] + b"middle" + DATA[1000:701_000] + b"tail"
    received = bytearray()
    partial_sends = 0
    while not connection.send(time.monotonic()):
        partial_sends += 1
        assert file.refs == sum(type(part) is FileRange for part in connection.output)  # held until sent
        received += peer.recv(1 << 20)
        assert expected.startswith(received)  # in order, nothing sent twice
    peer.setblocking(False)
    while len(received) < len(expected):
        received += peer.recv(1 << 20)
    assert partial_sends > 10
    assert received == expected
    assert counters[BYTES_SENT] == connection.bytes_sent == len(expected)
    assert file.refs == 0 and not connection.output
    file.retire()
    assert file.fd == -1
    connection.close()
    peer.close()


def test_close_gives_back_every_reference_sent_or_not(tmp_path):
    file = segment_file(tmp_path)
    connection, peer, _ = connection_pair()
    connection.respond([b"x", held(file, 0, 2 << 20)])
    connection.respond([b"y", held(file, 10, 100)])
    waiting = connection.reserve()  # an answer still waiting for a worker
    waiting.parts.append(held(file, 20, 200))
    assert not connection.send(time.monotonic())  # part of the first range went out
    assert file.refs == 3
    file.retire()  # retention removed it meanwhile
    assert file.fd >= 0
    connection.close()
    assert file.refs == 0 and file.fd == -1
    peer.close()
