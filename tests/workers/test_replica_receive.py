"""How a follower's connection to its leader (``LeaderLink``) takes in an answer, over
a real TCP connection to a leader played by the test, into a real Log through the
worker's own ReplicaFetcher: an answer that comes whole, one that comes in pieces
(its size split across reads, its body over many), and answers that must fail the
connection with nothing appended: a size past what was asked for, two answers where
one was asked for (in one read, or the second behind the end of a long first), an answer
nobody asked for. A size alone commits no memory, and an event of a link closed in
the same round of events is ignored."""

import glob
import os
import socket
import struct
import time

import pytest

from mpbroker.codec import responses
from mpbroker.codec.message import encode_message_set
from mpbroker.ipc.partition_table import PartitionTable, Role
from mpbroker.segments import LogConfig
from mpbroker.segments.log import Log
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replica_fetcher import RECEIVE_BYTES, ReplicaFetcher
from mpbroker.workers.replication import Replica
from tests.workers import fetcher_parts
from tests.workers.fetcher_parts import Loop

EPOCH = 9


class Config(fetcher_parts.Config):
    replica_fetch_max_bytes = 1 << 16  # what each fetch asks for, and so the most an answer may hold


class Warnings:
    """The worker's throttled log, kept: what the link said when it failed."""

    def __init__(self, lines: list):
        self.lines = lines

    def event(self, _key, _level, message: str) -> None:
        self.lines.append(message)


class Follower:
    """A follower of one partition whose leader is a listening socket of the test."""

    def __init__(self, tmp_path, config=None):
        self.directory = str(tmp_path)
        # no flush comes due (the fetcher has no flusher here)
        never = LogConfig(flush_interval_messages=1 << 40, flush_interval_ms=1 << 40)
        self.log = Log.open(self.directory, "t", 0, never, recover=False)
        publisher = Publisher(PartitionTable(4))
        publisher.add(self.log)
        self.warnings = []
        throttled = Warnings(self.warnings)
        self.loop = Loop()
        self.fetcher = ReplicaFetcher(self.loop, 2, config or Config(), None, publisher, None, throttled,
                                      lambda: None)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.replica = Replica(self.log)
        self.replica.role, self.replica.leader_epoch = Role.FOLLOWER, EPOCH
        self.replica.address = self.server.getsockname()
        self.fetcher.follow(self.replica)  # connects
        self.leader, _ = self.server.accept()
        self.link = self.fetcher.links[(self.replica.address, 0)]

    def run(self, seconds: float = 0.05) -> None:
        """The worker's event loop for a while."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for key, mask in self.loop.selector.select(0.005):
                key.data(mask)

    def request(self) -> bytes:
        """The next request the follower sent, whole."""
        self.run()
        self.leader.settimeout(5)
        (size,) = struct.unpack(">i", self.leader.recv(4, socket.MSG_WAITALL))
        return self.leader.recv(size, socket.MSG_WAITALL)

    def segment_bytes(self) -> bytes:
        return b"".join(open(path, "rb").read()
                        for path in sorted(glob.glob(os.path.join(self.directory, "**", "*.kafka"), recursive=True)))

    def close(self) -> None:
        self.fetcher.close()
        self.leader.close()
        self.server.close()


@pytest.fixture
def follower(tmp_path):
    follower = Follower(tmp_path)
    yield follower
    follower.close()


def answer(data: bytes, log_end: int) -> bytes:
    """A whole REPLICA_FETCH answer frame of one part carrying ``data``."""
    return responses.replica_fetch_header([len(data)]) + responses.replica_part_header(
        0, 0, 0, log_end, EPOCH, len(data)) + data


def messages(count: int, start: int = 0) -> bytes:
    return encode_message_set([b"message %d " % number * 20 for number in range(start, start + count)])


def test_an_answer_that_comes_whole_is_appended(follower):
    follower.request()
    data = messages(10)
    follower.leader.sendall(answer(data, len(data)))
    follower.run()
    assert follower.log.log_end == len(data)
    assert follower.segment_bytes() == data
    assert follower.link.sock is not None and not follower.warnings


@pytest.mark.parametrize("cuts", [(1, 3, 2), (4,), (7, 200, 1), (2, 2, 2, 2, 2, 2)])
def test_an_answer_that_comes_in_pieces_is_appended_once_whole(follower, cuts):
    follower.request()
    data = messages(200)  # under the 64 KB asked for
    frame = answer(data, len(data))
    pieces, pos = [], 0
    for cut in cuts:  # the first pieces as the cuts say (the size may be split), the rest in 5
        pieces.append(frame[pos:pos + cut])
        pos += cut
    step = (len(frame) - pos) // 5 + 1
    pieces += [frame[start:start + step] for start in range(pos, len(frame), step)]
    for piece in pieces:
        assert follower.log.log_end == 0
        follower.leader.sendall(piece)
        follower.run(0.02)  # each piece read on its own
    follower.run()
    assert follower.log.log_end == len(data)
    assert follower.segment_bytes() == data
    assert not follower.warnings
    follower.request()  # and it goes on: the next fetch, from the new end
    more = messages(5, 200)
    follower.leader.sendall(answer(more, len(data) + len(more)))
    follower.run()
    assert follower.segment_bytes() == data + more


def test_an_answer_larger_than_what_was_asked_for_fails_the_connection(follower):
    follower.request()
    follower.leader.sendall(struct.pack(">i", (1 << 16) + 10_000) + b"\0" * 64)
    follower.run()
    assert follower.link.sock is None and follower.log.log_end == 0
    assert any("an answer of 75536 bytes" in warning for warning in follower.warnings), follower.warnings


def test_two_answers_where_one_was_asked_for_fail_the_connection(follower):
    follower.request()
    data = messages(3)
    follower.leader.sendall(answer(data, len(data)) * 2)
    follower.run()
    assert follower.link.sock is None and follower.log.log_end == 0
    assert any("more than one answer" in warning for warning in follower.warnings), follower.warnings


def test_an_answer_nobody_asked_for_fails_the_connection(follower):
    data = messages(3)
    follower.request()
    follower.leader.sendall(answer(data, len(data)))
    follower.run()
    assert follower.log.log_end == len(data)
    follower.request()  # the next fetch, parked at the leader
    follower.link.in_flight = None  # as if it had been answered
    follower.leader.sendall(answer(messages(2), len(data)))
    follower.run()
    assert follower.link.sock is None and follower.log.log_end == len(data)
    assert any("nobody asked for" in warning for warning in follower.warnings), follower.warnings


def test_a_second_answer_behind_the_end_of_a_long_first_fails_the_connection(follower):
    follower.request()
    data = messages(200)
    frame = answer(data, len(data))
    follower.leader.sendall(frame[:10])
    follower.run()  # the first bytes: the rest goes into a buffer of the answer's size
    follower.leader.sendall(frame[10:] + frame)
    follower.run()
    assert follower.link.sock is None and follower.log.log_end == 0, "the same bytes would be appended twice"
    assert any("more than one answer" in warning for warning in follower.warnings), follower.warnings


class LargeFetches(Config):
    replica_fetch_max_bytes = 64 << 20


def test_a_size_alone_commits_no_memory_and_a_large_answer_grows_its_buffer_as_it_comes(tmp_path):
    follower = Follower(tmp_path, LargeFetches())
    try:
        follower.request()
        follower.leader.sendall(struct.pack(">i", 60 << 20) + b"\0\0")  # a 60 MB answer announced, 2 bytes sent
        follower.run()
        assert follower.link.sock is not None and len(follower.link.body) <= RECEIVE_BYTES
        follower.link.close()
        follower.leader.close()
        follower.fetcher.remove(follower.replica)

        follower.fetcher.follow(follower.replica)  # again, and now a 3 MB answer in pieces
        follower.leader, _ = follower.server.accept()
        follower.link = follower.fetcher.links[(follower.replica.address, 0)]
        follower.request()
        data = messages(12_000)
        assert len(data) > 3 * RECEIVE_BYTES
        frame = answer(data, len(data))
        sizes = set()
        for start in range(0, len(frame), 256 << 10):
            follower.leader.sendall(frame[start:start + (256 << 10)])
            follower.run(0.02)
            if follower.link.body is not None:
                sizes.add(len(follower.link.body))
        follower.run()
        assert follower.log.log_end == len(data) and follower.segment_bytes() == data
        assert len(sizes) > 1 and max(sizes) == len(frame) - 4, sizes  # grown, up to the answer's size
        assert not follower.warnings
    finally:
        follower.close()


def test_an_event_of_a_link_closed_in_the_same_round_is_ignored(follower):
    follower.request()
    data = messages(3)
    follower.leader.sendall(answer(data, len(data)))
    time.sleep(0.05)
    events = follower.loop.selector.select(1)
    assert events
    follower.fetcher.remove(follower.replica)  # as a roles change handled first in that round would
    for key, mask in events:
        key.data(mask)  # the link's event: its socket is gone
    assert follower.link.sock is None and follower.log.log_end == 0
