"""Size-prefixed frames: ``[int32 size][size bytes]``, for requests and responses alike.

``FrameReader`` is the receive side of one connection: the caller copies received
bytes into the buffer it hands out (``recv_into``-friendly, so a large frame is
received straight into its own buffer) and takes whole frames out. A size <= 0 or
larger than the limit is refused before any body is buffered.
"""

import struct

from mpbroker.errors import MPBrokerError

SIZE = struct.Struct(">i")
SIZE_BYTES = 4
_READ_CHUNK = 256 * 1024


class MalformedRequestError(MPBrokerError):
    """Bytes that are not a well-formed request; the connection should be closed."""


class FrameReader:
    """Accumulates received bytes and splits them into frames (bodies without the size)."""

    def __init__(self, max_frame_bytes: int, chunk_bytes: int = _READ_CHUNK):
        self.max_frame_bytes = max_frame_bytes
        self._chunk = chunk_bytes
        self._buffer = bytearray(chunk_bytes)
        self._start = 0  # first byte not yet handed out as a frame
        self._end = 0  # end of received bytes

    @property
    def buffered(self) -> int:
        return self._end - self._start

    def receive_buffer(self) -> memoryview:
        """A writable view to receive into; pass the byte count to ``commit``.

        For a large frame whose header has arrived, the room grows with what actually
        arrived (doubling, up to the frame's size), so the body lands in few receive
        calls while a peer that only claims a huge frame gets no huge buffer."""
        pending = self._end - self._start
        wanted = self._chunk
        if pending >= SIZE_BYTES:
            (size,) = SIZE.unpack_from(self._buffer, self._start)
            if 0 < size <= self.max_frame_bytes:
                missing = SIZE_BYTES + size - pending
                wanted = min(missing, max(wanted, pending))
        if len(self._buffer) - self._end < wanted:
            self._compact(wanted)
        return memoryview(self._buffer)[self._end:]

    def _compact(self, wanted: int) -> None:
        pending = self._end - self._start
        if self._start and len(self._buffer) - pending >= wanted:
            self._buffer[:pending] = self._buffer[self._start:self._end]
        else:
            grown = bytearray(max(pending + wanted, self._chunk))
            grown[:pending] = self._buffer[self._start:self._end]
            self._buffer = grown
        self._start, self._end = 0, pending

    def commit(self, count: int) -> None:
        self._end += count

    def feed(self, data) -> None:
        """Copy ``data`` in (for callers that did not receive into ``receive_buffer``)."""
        view = self.receive_buffer()
        while len(view) < len(data):
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
        if size <= 0 or size > self.max_frame_bytes:
            raise MalformedRequestError(
                f"frame size {size} is outside (0, {self.max_frame_bytes}] (max.socket.request.bytes)"
            )
        if available < SIZE_BYTES + size:
            return None
        start = self._start + SIZE_BYTES
        frame = bytes(self._buffer[start:start + size])
        self._start = start + size
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buffer) > 4 * self._chunk:
                self._buffer = bytearray(self._chunk)  # give back a large frame's buffer
        return frame
