"""Size-prefixed frames: ``[int32 size][size bytes]``, for requests and responses alike.

``FrameReader`` is the receive side of one connection: the caller copies received
bytes into the buffer it hands out (``recv_into``-friendly, so a large frame is
received straight into its own buffer) and takes whole frames out. A size below the
minimum (a request holds at least its 2-byte type) or above the limit is refused
before any body is buffered.

An event loop serving many connections gives all its readers one shared ``scratch``
buffer: a reader receives into it, whole frames are cut out of it, and only the start
of a frame that has not fully arrived is copied into a buffer of the reader's own
(``detach``, which the loop calls before another reader may receive). The next
receive puts that start back at the front of the scratch buffer and receives behind
it, so a frame cut in two costs no extra receive call; only a frame too large for
the scratch buffer grows a buffer of its own. An idle connection holds no receive
buffer at all, and one that stalls inside a frame holds what it sent of that frame.

``frame_started`` is when the first byte of the frame now pending arrived, on the
clock the caller passes to ``commit`` (a server's deadline for finishing a request):
set by a receive into an empty buffer, and by taking a frame out (the next frame
began in the receive that completed this one). ``restart_clock`` starts it again for
a caller that stopped taking frames for a while. One attribute store per receive and
per frame; the reader itself never reads a clock.
"""

import struct

from mpbroker.codec.errors import MPBrokerError

SIZE = struct.Struct(">i")
SIZE_BYTES = 4
READ_CHUNK = 256 * 1024
_SCRATCH_SHARE = 4  # a pending frame start of up to 1/4 of the scratch buffer goes back into it
_NO_BUFFER = b""  # a reader's buffer before it has one: immutable, so never written to by mistake


class MalformedRequestError(MPBrokerError):
    """Bytes that are not a well-formed request; the connection should be closed."""


class FrameReader:
    """Accumulates received bytes and splits them into frames (bodies without the size)."""

    def __init__(self, max_frame_bytes: int, chunk_bytes: int = READ_CHUNK, scratch: bytearray | None = None,
                 min_frame_bytes: int = 1):
        self.max_frame_bytes = max_frame_bytes
        self.min_frame_bytes = min_frame_bytes
        self._chunk = chunk_bytes
        self._scratch = scratch
        self._buffer = _NO_BUFFER  # replaced on first use
        self._start = 0  # first byte not yet handed out as a frame
        self._end = 0  # end of received bytes
        self._received_at = 0.0  # the ``now`` of the last commit
        self.frame_started = 0.0  # when the pending frame's first byte arrived (meaningful while ``buffered``)

    @property
    def buffered(self) -> int:
        return self._end - self._start

    def receive_buffer(self) -> memoryview:
        """A writable view to receive into; pass the byte count to ``commit``.

        For a large frame whose header has arrived, the room grows with what actually
        arrived (doubling, up to the frame's size), so the body lands in few receive
        calls while a peer that only claims a huge frame gets no huge buffer."""
        pending = self._end - self._start
        scratch = self._scratch
        if scratch is not None:
            if pending <= len(scratch) // _SCRATCH_SHARE:
                if pending:  # the start of a frame, kept by ``detach``: receive the rest behind it
                    scratch[:pending] = self._buffer[self._start:self._end]
                self._buffer = scratch
                self._start, self._end = 0, pending
                return memoryview(scratch)[pending:]
            self.detach()
        needed, grown = self._room(pending)
        if len(self._buffer) - self._end < needed:
            self._compact(grown)
        return memoryview(self._buffer)[self._end:]

    def _room(self, pending: int) -> tuple:
        """``(room the next receive needs, room to make when there is less)`` in the
        reader's own buffer: a chunk; for a large frame whose size has arrived, a
        receive needs a quarter chunk of room (or the rest of the frame), and the room
        made grows with what arrived (doubling; the whole rest once that is at most
        twice what arrived), so a frame of any size lands in a few buffers, while a
        peer that only claims a huge frame gets no huge buffer."""
        if pending >= SIZE_BYTES:
            (size,) = SIZE.unpack_from(self._buffer, self._start)
            if 0 < size <= self.max_frame_bytes:
                lacking = SIZE_BYTES + size - pending
                step = max(self._chunk, pending)
                return min(lacking, self._chunk // _SCRATCH_SHARE), lacking if lacking <= 2 * step else step
        return self._chunk, self._chunk

    def _compact(self, wanted: int) -> None:
        pending = self._end - self._start
        if self._start and len(self._buffer) - pending >= wanted:
            self._buffer[:pending] = self._buffer[self._start:self._end]
        else:
            grown = bytearray(max(pending + wanted, self._chunk))
            grown[:pending] = memoryview(self._buffer)[self._start:self._end]
            self._buffer = grown
        self._start, self._end = 0, pending

    def detach(self) -> None:
        """Stop using the shared scratch buffer: what is pending moves into a buffer of
        this reader's own. Call it before any other reader may receive."""
        if self._buffer is not self._scratch:
            return
        pending = self._end - self._start
        self._buffer = self._scratch[self._start:self._end] if pending else _NO_BUFFER  # a copy of the pending
        self._start, self._end = 0, pending

    def commit(self, count: int, now: float = 0.0) -> None:
        """``count`` bytes were received into ``receive_buffer()`` at time ``now``."""
        if self._end == self._start:
            self.frame_started = now  # the first byte of a new frame
        self._end += count
        self._received_at = now

    def restart_clock(self, now: float) -> None:
        """The pending frame (and any taken out from here on) counts as begun at ``now``:
        for a caller that did not take frames for a while (time it owes the peer)."""
        self.frame_started = self._received_at = now

    def feed(self, data) -> None:
        """Copy ``data`` in (for callers that did not receive into ``receive_buffer``)."""
        view = self.receive_buffer()
        if len(view) < len(data):
            del view
            self.detach()
            self._compact(len(data))
            view = memoryview(self._buffer)[self._end:]
        view[:len(data)] = data
        self.commit(len(data))

    def next_frame(self):
        """The next whole frame's body as bytes, or None; MalformedRequestError for a bad size."""
        available = self._end - self._start
        if available < SIZE_BYTES:
            return None
        (size,) = SIZE.unpack_from(self._buffer, self._start)
        if size < self.min_frame_bytes or size > self.max_frame_bytes:
            raise MalformedRequestError(
                f"frame size {size} is outside [{self.min_frame_bytes}, {self.max_frame_bytes}] "
                "(max.socket.request.bytes)"
            )
        if available < SIZE_BYTES + size:
            return None
        start = self._start + SIZE_BYTES
        frame = bytes(memoryview(self._buffer)[start:start + size])  # one copy (a slice of the bytearray would be two)
        self._start = start + size
        self.frame_started = self._received_at  # the next frame began in the receive that ended this one
        if self._start == self._end:
            self._start = self._end = 0
            if self._scratch is not None:
                if self._buffer is not self._scratch:
                    self._buffer = _NO_BUFFER  # an idle reader holds no buffer of its own
            elif len(self._buffer) > 4 * self._chunk:
                self._buffer = bytearray(self._chunk)  # give back a large frame's buffer
        return frame
