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
``last_active`` is when bytes last moved either way or an answer was queued for output
(``connections.max.idle.ms``), and ``reader.frame_started`` when the request still
arriving began (``request.receive.timeout.ms``); the acceptor's sweep (``limits``)
reads both.
Receive buffers come from the acceptor's shared scratch buffer (``FrameReader``), so
an idle connection holds none.

A connection owns its state: every transition is a method here, so no other module
sets a flag and the rules sit in one place. The router pauses a connection whose
produce filled a worker's queue and unpauses it once the queue drained (``pause``,
``unpause``); ``handle_frames`` throttles it when ``max.queued.responses`` answers
wait, and ``after_send`` lifts that once the client read half of them (and notes
whether a send waits for the socket); the acceptor's stop makes it ``begin_closing``.
``interest()`` turns the flags into the selector events, which the acceptor applies
to its selector in one place. A closed connection ignores every transition. The
flags are read through properties; ``closed`` and ``queued``, read on the hot path,
are plain attributes, set only here.
"""

import os
import socket
from collections import deque
from selectors import EVENT_READ, EVENT_WRITE

from mpbroker.codec.framing import FrameReader
from mpbroker.ipc.counters import BYTES_SENT
from mpbroker.segments.log_view import FileRange

REQUEST_TYPE_BYTES = 2  # the least a request frame holds

_MAX_IOV = 64

# What the acceptor does after a send (``Connection.after_send``); NOTHING, the usual, is 0.
NOTHING = 0
NEW_INTEREST = 1  # apply ``interest()`` to the selector: a send now waits for the socket, or no longer
READ_AGAIN = 2  # throttled no more: handle the frames that arrived, then apply ``interest()``
CLOSE = 3  # closing, and every answer went out


class Response:
    __slots__ = ("parts", "ready")

    def __init__(self, parts=None):
        self.parts = deque(parts) if parts is not None else deque()
        self.ready = parts is not None

    def fill(self, parts) -> None:
        self.parts.extend(parts)
        self.ready = True


class Connection:
    __slots__ = ("sock", "fd", "peer", "reader", "responses", "output", "queued", "_paused", "_throttled", "_closing",
                 "closed", "_wants_write", "number", "counters", "bytes_sent", "_last_active", "handlers")

    def __init__(self, sock: socket.socket, peer, max_frame_bytes: int, number: int, counters, scratch: bytearray,
                 now: float, handlers=None):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = FrameReader(max_frame_bytes, scratch=scratch, min_frame_bytes=REQUEST_TYPE_BYTES)
        self.responses = deque()  # in request order; the head may still wait for a worker
        self.output = deque()  # parts of ready responses, in order: bytes or FileRange (holding its file)
        self.queued = 0  # answers queued and not yet sent (a MULTIFETCH counts per partition)
        self._paused = False  # not reading: a worker's queue is over its limit
        self._throttled = False  # not reading: too many answers wait until the client reads them
        self._closing = False  # close once the queued responses are out
        self.closed = False
        self._wants_write = False  # a send waits for room in the socket: EVENT_WRITE
        self.number = number
        self.counters = counters  # the acceptor's CounterTable row (bytes sent)
        self.bytes_sent = 0
        self._last_active = now  # time.monotonic() of the last byte received or sent, or answer queued
        self.handlers = handlers  # its protocol's request handlers (``handle(connection, frame)``)

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
    def owed_answer(self) -> bool:
        """The broker owes this client: an answer not yet handed to the socket (waiting
        for a worker, or ready since this round of events and not sent yet), or
        requests waiting for room in a worker's queue. Not idle, however long ago its
        last byte moved (``limits.overdue``)."""
        return self._paused or bool(self.responses)

    # --- state: read-only outside; the transitions below change it ----------------

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def throttled(self) -> bool:
        return self._throttled

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def wants_write(self) -> bool:
        return self._wants_write

    @property
    def last_active(self) -> float:
        return self._last_active

    def interest(self, stopping: bool) -> int:
        """The selector events to wait for: EVENT_READ unless paused, throttled, closing
        or the acceptor is ``stopping``; EVENT_WRITE while a send waits for the socket;
        0 once closed."""
        if self.closed:
            return 0
        events = 0
        if not (self._paused or self._throttled or self._closing or stopping):
            events = EVENT_READ
        if self._wants_write:
            events |= EVENT_WRITE
        return events

    # --- transitions ------------------------------------------------------------------

    def pause(self) -> bool:
        """Stop reading: a worker's queue is over its limit (the router). True if this
        paused it; False if it was paused already, or is closed."""
        if self._paused or self.closed:
            return False
        self._paused = True
        return True

    def unpause(self) -> None:
        """The worker's queue drained (or the worker died): read on, unless throttled or
        closing. The acceptor handles the frames that arrived meanwhile."""
        if not self.closed:
            self._paused = False

    def begin_closing(self) -> None:
        """Read no more requests; close once the queued answers are out (``after_send``)."""
        if not self.closed:
            self._closing = True

    def handle_frames(self, handlers, max_queued: int) -> bool:
        """Hand each whole frame received to ``handlers.handle(self, frame)``, in order,
        until none is left, the connection is paused (a handler's produce filled a
        worker's queue) or closed, or ``max_queued`` answers wait: then it is throttled
        until its client has read half of them (``after_send``). True if it is not to be
        read now (paused or throttled): the acceptor applies ``interest()``. A
        handler's exception propagates."""
        reader = self.reader
        while not self._paused and not self.closed:
            if self.queued >= max_queued:
                self._throttled = True
                break
            frame = reader.next_frame()
            if frame is None:
                break
            handlers.handle(self, frame)
        return self._paused or self._throttled

    def after_send(self, done: bool, max_queued: int) -> int:
        """What the acceptor does after ``send()`` returned ``done``: ``CLOSE`` a closing
        connection whose answers are all out; ``READ_AGAIN`` a throttled one whose
        client has read half of ``max_queued`` answers (it is read again; its interest
        follows its frames); ``NEW_INTEREST`` when a send starts or stops waiting for
        the socket; else ``NOTHING``."""
        if self.closed:
            return NOTHING
        if done and self._closing and not self.responses and not self.output:
            return CLOSE
        step = NOTHING
        if self._wants_write == done:  # it changes to ``not done``
            self._wants_write = not done
            step = NEW_INTEREST
        if self._throttled and self.queued <= max_queued // 2:
            self._throttled = False
            step = READ_AGAIN
        return step

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
        socket. ``now`` is the last activity if an answer was queued for output or a
        byte went out (an answer the socket has no room for yet does not find the
        connection idle since its request: ``limits``). Raises OSError if the peer is
        gone."""
        responses, output = self.responses, self.output
        if responses and responses[0].ready:
            self._last_active = now  # an answer queued for output: the client's idle clock starts again
            while responses and responses[0].ready:
                output.extend(responses.popleft().parts)
        sent_before = self.bytes_sent
        while output:
            if type(output[0]) is FileRange:
                if not self._send_file(output):
                    break
                output.popleft().file.release()
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
