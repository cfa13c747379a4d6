"""One client connection: frames in, responses out in request order.

Every request that gets an answer reserves a ``Response`` in the connection's queue
when it arrives; answers computed here (fetch, OFFSETS) are ready at once, produce
acknowledgements become ready when the worker answers. Output goes in queue order:
runs of ready byte buffers with one ``sendmsg`` (``MSG_MORE`` when file data
follows), file extents with ``os.sendfile`` straight from the segment file. A partial
send keeps its place and continues when the socket is writable again.

Bounds against hostile clients: ``queued`` counts the answers queued and not yet sent
(a MULTIFETCH answer once per partition), so the acceptor can stop reading from a
client that sends requests without reading the answers (``max.queued.responses``);
``last_active`` is when bytes last moved either way (``connections.max.idle.ms``), and
``reader.frame_started`` when the request still arriving began
(``request.receive.timeout.ms``); the acceptor's sweep (``limits``) reads both.
Receive buffers come from the acceptor's shared scratch buffer (``FrameReader``), so
an idle connection holds none.
"""

import os
import socket
from collections import deque

from mpbroker.codec.framing import FrameReader
from mpbroker.ipc.counters import BYTES_SENT

REQUEST_TYPE_BYTES = 2  # the least a request frame holds

_MAX_IOV = 64


class FileChunk:
    """Bytes of a segment file still to send; holds a reference on the open file."""

    __slots__ = ("file", "position", "remaining")

    def __init__(self, segment_file, position: int, length: int):
        segment_file.acquire()
        self.file = segment_file
        self.position = position
        self.remaining = length

    def release(self) -> None:
        if self.file is not None:
            self.file.release()
            self.file = None


class Response:
    __slots__ = ("parts", "ready")

    def __init__(self, parts=None):
        self.parts = deque(parts) if parts is not None else deque()
        self.ready = parts is not None

    def fill(self, parts) -> None:
        self.parts.extend(parts)
        self.ready = True


class Connection:
    __slots__ = ("sock", "fd", "peer", "reader", "responses", "output", "queued", "paused", "throttled", "closing",
                 "closed", "wants_write", "number", "counters", "bytes_sent", "_last_active")

    def __init__(self, sock: socket.socket, peer, max_frame_bytes: int, number: int, counters, scratch: bytearray,
                 now: float):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = FrameReader(max_frame_bytes, scratch=scratch, min_frame_bytes=REQUEST_TYPE_BYTES)
        self.responses = deque()  # in request order; the head may still wait for a worker
        self.output = deque()  # parts of ready responses, in order: bytes or FileChunk
        self.queued = 0  # answers queued and not yet sent (a MULTIFETCH counts per partition)
        self.paused = False  # not reading: a worker's queue is over its limit
        self.throttled = False  # not reading: too many answers wait until the client reads them
        self.closing = False  # close once the queued responses are out
        self.closed = False
        self.wants_write = False  # registered for EVENT_WRITE
        self.number = number
        self.counters = counters  # the acceptor's CounterTable row (bytes sent)
        self.bytes_sent = 0
        self._last_active = now  # time.monotonic() of the last byte received or sent

    def __repr__(self) -> str:
        return f"connection #{self.number} from {self.peer}"

    def reserve(self) -> Response:
        response = Response()
        self.responses.append(response)
        self.queued += 1
        return response

    def respond(self, parts, answers: int = 1) -> None:
        self.responses.append(Response(parts))
        self.queued += answers

    @property
    def idle(self) -> bool:
        """Nothing queued: every answer went out and none is awaited."""
        return not self.responses and not self.output

    @property
    def awaiting_worker(self) -> bool:
        """The broker owes this client: its next answer waits for a worker, or its
        requests wait for room in a worker's queue."""
        return self.paused or bool(self.responses and not self.responses[0].ready)

    @property
    def last_active(self) -> float:
        return self._last_active

    # --- bytes in and out -------------------------------------------------------------

    def receive(self, now: float) -> int:
        """Receive what the socket holds into the reader, at time ``now``: the byte
        count, 0 if the peer closed, -1 if there was nothing. Raises OSError if the
        socket failed."""
        reader = self.reader
        try:
            view = reader.receive_buffer()
            received = self.sock.recv_into(view)
            del view
        except (BlockingIOError, InterruptedError):
            reader.detach()  # the pending frame start was put back into the shared scratch buffer
            return -1
        if received:
            reader.commit(received, now)
            self._last_active = now
        return received

    def send(self, now: float) -> bool:
        """Send what is ready, in order; True if nothing ready is left waiting for the
        socket. ``now`` is the last activity if a byte went out. Raises OSError if the
        peer is gone."""
        responses, output = self.responses, self.output
        while responses and responses[0].ready:
            output.extend(responses.popleft().parts)
        sent_before = self.bytes_sent
        while output:
            head = output[0]
            if isinstance(head, FileChunk):
                if not self._send_file(head):
                    break
                head.release()
                output.popleft()
            elif not self._send_buffers(output):
                break
        else:
            self.queued = len(responses)  # what is left waits for a worker
        if self.bytes_sent != sent_before:
            self._last_active = now
        return not output

    def _send_buffers(self, output) -> bool:
        """One sendmsg of the leading byte buffers; True if all of them went out."""
        buffers = []
        more = False
        for part in output:
            if isinstance(part, FileChunk):
                more = True
                break
            buffers.append(part)
            if len(buffers) == _MAX_IOV:
                break
        try:
            sent = self.sock.sendmsg(buffers, (), socket.MSG_MORE if more else 0)
        except (BlockingIOError, InterruptedError):
            return False
        self.counters[BYTES_SENT] += sent
        self.bytes_sent += sent
        for buffer in buffers:
            if sent >= len(buffer):
                sent -= len(buffer)
                output.popleft()
            else:
                output[0] = memoryview(buffer)[sent:]
                return False
        return True

    def _send_file(self, chunk: FileChunk) -> bool:
        while chunk.remaining:
            try:
                sent = os.sendfile(self.fd, chunk.file.fd, chunk.position, chunk.remaining)
            except (BlockingIOError, InterruptedError):
                return False
            if sent == 0:  # the file is shorter than published: never send less silently
                raise OSError(f"segment file ended {chunk.remaining} bytes early")
            chunk.position += sent
            chunk.remaining -= sent
            self.counters[BYTES_SENT] += sent
            self.bytes_sent += sent
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for parts in [self.output, *(response.parts for response in self.responses)]:
            for part in parts:
                if isinstance(part, FileChunk):
                    part.release()
        self.responses.clear()
        self.output.clear()
        try:
            self.sock.close()
        except OSError:
            pass
