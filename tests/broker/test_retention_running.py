"""Retention inside a running broker: the worker deletes expired segments (their dates
set back with ``os.utime``; a reload runs retention at once, as the cleanup timer does
every ``log.cleanup.interval.mins``, at least a minute), and the acceptor, which serves
fetches and OFFSETS from the files, follows: a fetch below the new log start gets
OffsetOutOfRange, OFFSETS -2 the new earliest offset. A slow reader in the middle of a
``sendfile`` of the deleted segment still gets every byte (the open file keeps them), the
acceptor goes on serving others and closes the file once that answer is out."""

import os
import signal
import socket
import time

from mpbroker.codec import requests as rq
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from mpbroker.segments.naming import partition_dir_name, segment_file_name
from tests.polling import wait_for

from .wire import WireClient

TOPIC = "old"
SEGMENT_BYTES = 16_000_000
PAYLOAD_BYTES = 990_000  # four to a set, four sets to the first segment (~15.8 MB)
MONTH_S = 30 * 24 * 3600


def open_segment_fds(pid: int, directory: str) -> dict:
    """The acceptor's open files under ``directory``: fd -> link target ("... (deleted)"
    once unlinked)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(directory):
            found[int(fd)] = target
    return found


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(1 << 20, size - len(data)))
        if not chunk:
            raise ConnectionError(f"the broker closed the connection after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def test_retention_deletes_segments_under_a_running_broker_and_a_slow_fetch_of_one_completes(broker_factory):
    broker = broker_factory(log_file_size=SEGMENT_BYTES, num_partitions=1)
    directory = os.path.join(os.path.realpath(broker.log_dir), partition_dir_name(TOPIC, 0))
    sets = [encode_message_set([os.urandom(PAYLOAD_BYTES) for _ in range(4)]) for _ in range(5)]
    with WireClient(broker.port, timeout=60) as client:
        offsets = [client.produce_acked(TOPIC, 0, message_set).offset for message_set in sets]
    first_segment = b"".join(sets[:4])
    second_base = len(first_segment)
    assert offsets == [sum(map(len, sets[:n])) for n in range(5)]
    assert sorted(os.listdir(directory)) == [segment_file_name(0), segment_file_name(second_base)]
    status = broker.status()
    acceptor = status["acceptor"]["pid"]

    # A slow reader asks for the whole first segment and reads 64 KB of it: the acceptor
    # is left in the middle of its sendfile (a small receive window keeps the rest back).
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    slow.settimeout(30)
    slow.connect(("127.0.0.1", broker.port))
    slow.sendall(rq.encode_fetch(TOPIC, 0, 0, len(first_segment)))
    head = receive_exactly(slow, 6 + 64 * 1024)
    assert int.from_bytes(head[:4], "big") == 2 + len(first_segment) and head[4:6] == b"\0\0"
    first_path = os.path.join(directory, segment_file_name(0))
    assert first_path in open_segment_fds(acceptor, directory).values()

    # The first segment is a month old; the reload runs retention at once.
    month_ago = time.time() - MONTH_S
    os.utime(first_path, (month_ago, month_ago))
    broker.send_signal(signal.SIGHUP)
    wait_for(lambda: not os.path.exists(first_path), 10, "retention to delete the first segment", broker.output)
    assert f"retention: deleting {first_path}" in broker.output()
    assert os.listdir(directory) == [segment_file_name(second_base)]

    # Others are served meanwhile, from what the acceptor lists now.
    with WireClient(broker.port) as client:
        assert client.fetch(TOPIC, 0, 0) == (ErrorCode.OFFSET_OUT_OF_RANGE, b"")
        assert client.fetch(TOPIC, 0, offsets[2]) == (ErrorCode.OFFSET_OUT_OF_RANGE, b"")
        assert client.offsets(TOPIC, 0, -2) == (0, [second_base])
        error, data = client.fetch(TOPIC, 0, second_base, len(sets[4]))
        assert (error, data) == (0, sets[4])
        ack = client.produce_acked(TOPIC, 0, encode_message_set([b"after retention"]))
        assert ack.error == 0 and ack.offset == second_base + len(sets[4])
    assert f"{first_path} (deleted)" in open_segment_fds(acceptor, directory).values()  # still being sent

    # The slow reader gets every byte of the deleted segment, and the acceptor lets go of it.
    rest = receive_exactly(slow, len(first_segment) - 64 * 1024)
    assert head[6:] + rest == first_segment
    slow.sendall(rq.encode_offsets(TOPIC, 0, -2, 10))  # the same connection goes on
    answer = receive_exactly(slow, 4 + 2 + 4 + 8)
    assert answer[4:6] == b"\0\0" and int.from_bytes(answer[10:18], "big") == second_base
    slow.close()
    wait_for(lambda: f"{first_path} (deleted)" not in open_segment_fds(acceptor, directory).values(), 10,
             "the acceptor to close the deleted segment once its answer was sent")
    after = broker.status()
    assert after["acceptor"]["pid"] == acceptor and after["acceptor"]["restarts"] == 0
    assert all(worker["restarts"] == 0 for worker in after["workers"])
    (partition,) = after["partitions"]
    assert partition["log_start"] == second_base and partition["segments"] == 1
    assert broker.stop() == 0
