"""One client connection: frames in, responses out in request order.

Every request that gets an answer reserves a ``Response`` in the connection's queue
when it arrives; answers computed here (fetch, OFFSETS) are ready at once, produce
acknowledgements become ready when the worker answers. Output goes in queue order:
runs of ready byte buffers with one ``sendmsg`` (``MSG_MORE`` when file data
follows), file ranges (``FileRange``, each holding a reference on its segment file)
with ``os.sendfile`` straight from the file. A partial send keeps its place (the rest of
a buffer or range replaces it) and continues when the socket is writable again.

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
from mpbroker.segments.log_view import FileRange

REQUEST_TYPE_BYTES = 2  # the least a request frame holds

_MAX_IOV = 64


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
                 "closed", "wants_write", "number", "counters", "bytes_sent", "last_active")

    def __init__(self, sock: socket.socket, peer, max_frame_bytes: int, number: int, counters, scratch: bytearray,
                 now: float):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = FrameReader(max_frame_bytes, scratch=scratch, min_frame_bytes=REQUEST_TYPE_BYTES)
        self.responses = deque()  # in request order; the head may still wait for a worker
        self.output = deque()  # parts of ready responses, in order: bytes or FileRange (holding its file)
        self.queued = 0  # answers queued and not yet sent (a MULTIFETCH counts per partition)
        self.paused = False  # not reading: a worker's queue is over its limit
        self.throttled = False  # not reading: too many answers wait until the client reads them
        self.closing = False  # close once the queued responses are out
        self.closed = False
        self.wants_write = False  # registered for EVENT_WRITE
        self.number = number
        self.counters = counters  # the acceptor's CounterTable row (bytes sent)
        self.bytes_sent = 0
        self.last_active = now  # time.monotonic() of the last byte received or sent

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

    def send(self) -> bool:
        """Send what is ready, in order; True if nothing ready is left waiting for the
        socket. Raises OSError if the peer is gone."""
        responses, output = self.responses, self.output
        while responses and responses[0].ready:
            output.extend(responses.popleft().parts)
        while output:
            if type(output[0]) is FileRange:
                if not self._send_file(output):
                    return False
                output.popleft().file.release()
            elif not self._send_buffers(output):
                return False
        self.queued = len(responses)  # what is left waits for a worker
        return True

    def _send_buffers(self, output) -> bool:
        """One sendmsg of the leading byte buffers; True if all of them went out."""
        buffers = []
        more = False
        for part in output:
            if type(part) is FileRange:
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

    def _send_file(self, output) -> bool:
        """sendfile of the leading FileRange; True if all of it went out (else its rest
        replaces it)."""
        head = output[0]
        file, position, remaining = head
        while remaining:
            try:
                sent = os.sendfile(self.fd, file.fd, position, remaining)
            except (BlockingIOError, InterruptedError):
                if remaining != head.length:
                    output[0] = FileRange(file, position, remaining)
                return False
            if sent == 0:  # the file is shorter than published: never send less silently
                raise OSError(f"segment file ended {remaining} bytes early")
            position += sent
            remaining -= sent
            self.counters[BYTES_SENT] += sent
            self.bytes_sent += sent
        return True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for parts in [self.output, *(response.parts for response in self.responses)]:
            for part in parts:
                if type(part) is FileRange:
                    part.file.release()
        self.responses.clear()
        self.output.clear()
        try:
            self.sock.close()
        except OSError:
            pass
