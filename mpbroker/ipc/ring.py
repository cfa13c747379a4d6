"""A single-producer, single-consumer ring of records in anonymous shared memory.

Layout: a 4 KiB header, then ``capacity`` bytes of data (a power of two). The
writer owns ``head`` (bytes ever published), the reader owns ``tail`` (bytes ever
consumed); both only grow, each on its own cache line. A record is
``[u32 body_length][u32 kind][body]`` padded to 8 bytes and never wraps: when it
does not fit before the end of the data area, a padding record fills the rest.

Visibility: the writer copies a record, then stores ``head``; the reader loads
``head``, then reads records. On x86-64 (TSO) stores become visible in program order
and loads are not reordered with loads, which is all the hand-off of records needs;
the broker checks the architecture at start-up. The counters are stored and loaded
as whole aligned words through a typed memoryview (``struct.pack_into`` would
zero-fill first and could show a reader a torn value).

Wake-ups: each ``publish`` that made records visible writes the ring's data eventfd
once (however many records it carries), so a reader blocked in ``select`` wakes; this
path cannot lose a wake-up. A writer that finds the ring full sets ``writer_waiting``;
the reader, after releasing space, clears it and writes the space eventfd. That
handshake is a store followed by a load on each side, which x86 may reorder, so a
space wake-up can be missed: writers with records pending also retry on a short timer
(5 ms in the acceptor and the workers). Neither side spins.
"""

import mmap
import os
import struct

HEADER_BYTES = 4096
# Indexes into the header seen as native u64s; each counter on its own cache line.
_HEAD = 0
_TAIL = 8
_WRITER_WAITING = 16
_GENERATION = 24
RECORD_HEADER = struct.Struct("<II")  # body length, kind
RECORD_HEADER_BYTES = RECORD_HEADER.size
KIND_PAD = 0


class Ring:
    def __init__(self, capacity: int):
        if capacity < 4096 or capacity & (capacity - 1):
            raise ValueError(f"ring capacity must be a power of two >= 4096, not {capacity}")
        self.capacity = capacity
        self._mask = capacity - 1
        self.max_record_body = capacity // 4 - RECORD_HEADER_BYTES
        self._mm = mmap.mmap(-1, HEADER_BYTES + capacity, flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        view = memoryview(self._mm)
        # Aligned 8-byte loads and stores through a typed view are single instructions.
        self._counters = view[:HEADER_BYTES].cast("Q")
        self._data = view[HEADER_BYTES:]
        self.data_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.space_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._local_head = 0  # writer: end of written, not necessarily published, records
        self._known_tail = 0  # writer: the reader's tail when last looked at (it only grows)
        self._local_tail = 0  # reader: end of records handed out by read()

    @property
    def head(self) -> int:
        return self._counters[_HEAD]

    @property
    def tail(self) -> int:
        return self._counters[_TAIL]

    @property
    def used(self) -> int:
        return self._counters[_HEAD] - self._counters[_TAIL]

    # --- writer ---------------------------------------------------------------

    def attach_writer(self) -> None:
        """Take over the writer's side (after fork, or in a respawned writer)."""
        self._local_head = self._counters[_HEAD]
        self._known_tail = self._counters[_TAIL]

    def free_bytes(self) -> int:
        return self.capacity - (self._local_head - self._counters[_TAIL])

    def try_write(self, kind: int, *parts) -> bool:
        """Copy one record made of ``parts``; False (and ``writer_waiting`` set) if full.
        The record becomes visible at the next ``publish``."""
        body = 0
        for part in parts:
            body += len(part)
        if body > self.max_record_body:
            raise ValueError(f"record body of {body} bytes exceeds the ring's limit {self.max_record_body}")
        size = (RECORD_HEADER_BYTES + body + 7) & ~7
        head = self._local_head
        position = head & self._mask
        room_to_end = self.capacity - position
        needed = size if size <= room_to_end else size + room_to_end
        if self.capacity - (head - self._known_tail) < needed:
            counters = self._counters
            self._known_tail = counters[_TAIL]
            if self.capacity - (head - self._known_tail) < needed:
                counters[_WRITER_WAITING] = 1
                # The reader may have released space between our look and the flag.
                self._known_tail = counters[_TAIL]
                if self.capacity - (head - self._known_tail) < needed:
                    return False
                counters[_WRITER_WAITING] = 0
        data = self._data
        if size > room_to_end:
            RECORD_HEADER.pack_into(data, position, room_to_end - RECORD_HEADER_BYTES, KIND_PAD)
            head += room_to_end
            position = 0
        RECORD_HEADER.pack_into(data, position, body, kind)
        at = position + RECORD_HEADER_BYTES
        for part in parts:
            end = at + len(part)
            data[at:end] = part
            at = end
        self._local_head = head + size
        return True

    def publish(self) -> bool:
        """Make written records visible and wake the reader; True if there were any."""
        if self._local_head == self._counters[_HEAD]:
            return False
        self._counters[_HEAD] = self._local_head
        os.eventfd_write(self.data_fd, 1)
        return True

    # --- reader ---------------------------------------------------------------

    def attach_reader(self, discard: bool = False) -> None:
        """Take over the reader's side; with ``discard``, drop everything published so far."""
        if discard:
            self._counters[_TAIL] = self._counters[_HEAD]
        self._local_tail = self._counters[_TAIL]

    def read(self) -> list:
        """Every published record not yet read, as ``(kind, body view)``. The views
        stay valid until ``release``; copy what must outlive it."""
        head = self._counters[_HEAD]
        tail = self._local_tail
        records = []
        mask = self._mask
        data = self._data
        unpack = RECORD_HEADER.unpack_from
        while tail < head:
            position = tail & mask
            body, kind = unpack(data, position)
            if kind != KIND_PAD:
                start = position + RECORD_HEADER_BYTES
                records.append((kind, data[start:start + body]))
            tail += (RECORD_HEADER_BYTES + body + 7) & ~7
        self._local_tail = tail
        return records

    def release(self) -> None:
        """Give the space of everything read back to the writer (wake it if it waits)."""
        counters = self._counters
        if self._local_tail == counters[_TAIL]:
            return
        counters[_TAIL] = self._local_tail
        if counters[_WRITER_WAITING]:
            counters[_WRITER_WAITING] = 0
            os.eventfd_write(self.space_fd, 1)

    # --- both -----------------------------------------------------------------

    @staticmethod
    def clear_notification(fd: int) -> None:
        """Reset an eventfd after a wake-up (no error if it was already zero)."""
        try:
            os.eventfd_read(fd)
        except BlockingIOError:
            pass

    def reset(self) -> None:
        """Empty the ring; only while neither side is using it (the supervisor, between
        a dead worker and its replacement)."""
        counters = self._counters
        counters[_HEAD] = 0
        counters[_TAIL] = 0
        counters[_WRITER_WAITING] = 0
        counters[_GENERATION] += 1
        self._local_head = self._local_tail = self._known_tail = 0
        self.clear_notification(self.data_fd)
        self.clear_notification(self.space_fd)

    @property
    def generation(self) -> int:
        return self._counters[_GENERATION]
