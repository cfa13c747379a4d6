"""The no-broker baselines of ``bench/limits.py``: what plain Python does, simply and
as fast as it simply can, with the same bytes over the same kind of socket.

Each server runs in a process of its own (forked, like the broker's processes are
separate from the client) on a loopback port and serves one connection at a time,
until it is stopped:

- ``frame_sink``: receives into a 1 MiB buffer and walks the length-prefixed frames in
  what arrived (as many per receive as came); every PRODUCE_ACKED frame is answered,
  once the whole of it is in, with a frame of the broker's acknowledgement's size
  (error 0, offsets 0), so ``broker_bench.produce`` runs against it unchanged. With a
  ``path`` it first writes every byte it receives to that file (unbuffered ``write``).
- ``segment_server``: answers each FETCH frame with the 6-byte response header (sent
  with ``MSG_MORE``, as the broker does, so it leaves with the file's first bytes) and
  ``os.sendfile`` of the range the broker would send from the same segment files
  (``mpbroker.segments.log_view.locate``: never past a segment's end).

``write_file`` is the disk baseline: a loop of 1 MB writes, the time of each noted.
"""

import multiprocessing
import os
import signal
import socket
import struct
import time

from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.framing import FrameReader
from mpbroker.segments.log_view import locate
from mpbroker.segments.naming import list_segment_bases, segment_file_name

RECEIVE_BYTES = 1 << 20
_FRAME_HEAD = struct.Struct(">ih")  # size, request type: the first 6 bytes of a request frame
_ACK = rs.produce_ack_response(0, 0, 0, 0)


class ServerProcess:
    """``serve(connection, *args)`` for each connection accepted on a loopback port, in
    a forked process; ``with`` starts it and stops it (SIGTERM, then SIGKILL)."""

    def __init__(self, serve, *args):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.process = multiprocessing.get_context("fork").Process(
            target=_accept_forever, args=(self.listener, serve, args), name=serve.__name__, daemon=True)

    def __enter__(self) -> "ServerProcess":
        self.process.start()
        self.listener.close()  # the child has its own copy
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


def _accept_forever(listener, serve, args) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the benchmark's handler: stopped is stopped
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the benchmark, which stops this
    while True:
        connection, _ = listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            serve(connection, *args)
        except ConnectionError:
            pass
        finally:
            connection.close()


def frame_sink(connection, path=None) -> None:
    """Read frames until the peer closes; answer PRODUCE_ACKED frames; write to ``path``."""
    out = open(path, "wb", buffering=0) if path else None
    try:
        _walk_frames(connection, out)
    finally:
        if out is not None:
            out.close()


def _walk_frames(connection, out) -> None:
    buffer = bytearray(RECEIVE_BYTES)
    view = memoryview(buffer)
    head = b""  # the start of a frame's first 6 bytes, when a receive ended inside them
    remaining = 0  # bytes of the current frame still to come
    answer = False  # whether the current frame gets an answer once it is all in
    while True:
        count = connection.recv_into(buffer)
        if not count:
            return
        if out is not None:
            write_all(out, view[:count])
        position = 0
        while position < count:
            if remaining:
                taken = min(remaining, count - position)
                position += taken
                remaining -= taken
            else:
                taken = min(_FRAME_HEAD.size - len(head), count - position)
                head += buffer[position:position + taken]
                position += taken
                if len(head) < _FRAME_HEAD.size:
                    break
                size, kind = _FRAME_HEAD.unpack(head)
                head = b""
                remaining = size - 2
                answer = kind == rq.RequestType.PRODUCE_ACKED
            if not remaining and answer:
                connection.sendall(_ACK)
                answer = False


def write_all(out, data) -> None:
    view = memoryview(data)
    while view:
        view = view[out.write(view):]


def segment_server(connection, directory: str, end: int) -> None:
    """Serve FETCHes of the partition in ``directory`` (bytes up to ``end``)."""
    bases = list_segment_bases(directory)
    files = [open(os.path.join(directory, segment_file_name(base)), "rb") for base in bases]
    reader = FrameReader(1 << 20)
    try:
        while True:
            frame = reader.next_frame()
            if frame is None:
                view = reader.receive_buffer()
                count = connection.recv_into(view)
                del view
                if not count:
                    return
                reader.commit(count)
                continue
            request = rq.decode_request(frame)
            found = locate(bases, end, request.offset, request.max_size, files.__getitem__)
            # MSG_MORE: the header goes out with the file's first bytes (as the broker sends it)
            connection.sendall(rs.response_header(0, found.length), socket.MSG_MORE if found.length else 0)
            position, remaining = found.position, found.length
            while remaining:
                sent = os.sendfile(connection.fileno(), found.file.fileno(), position, remaining)
                position += sent
                remaining -= sent
    finally:
        for file in files:
            file.close()


def write_file(path: str, total_bytes: int, block_bytes: int = 1_000_000) -> list:
    """Write ``total_bytes`` in ``block_bytes`` writes; ``[(seconds since the start,
    bytes written), ...]`` after each write."""
    block = os.urandom(block_bytes)
    timeline = []
    written = 0
    with open(path, "wb", buffering=0) as out:
        started = time.perf_counter()
        while written < total_bytes:
            write_all(out, block)
            written += block_bytes
            timeline.append((time.perf_counter() - started, written))
    return timeline
