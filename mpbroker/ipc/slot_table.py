"""The state of every worker slot (and the acceptor), in shared memory.

The supervisor writes pid, state, generation, restarts and start time; the process
in the slot writes its heartbeat (milliseconds) and nothing else. Readers: the
supervisor (liveness, status) and the acceptor (which slots take requests after it
was itself respawned).
"""

import mmap
import struct
from enum import IntEnum
from typing import NamedTuple

_SLOT_BYTES = 64
# pid, state, generation, restarts, started_ms, heartbeat_ms
_FIELDS = struct.Struct("<qqqqqq")
_HEARTBEAT_AT = 40


class SlotState(IntEnum):
    EMPTY = 0
    STARTING = 1  # forked, opening and recovering its logs
    UP = 2  # serving requests
    DOWN = 3  # dead, waiting to be respawned
    STOPPING = 4


class Slot(NamedTuple):
    pid: int
    state: int
    generation: int
    restarts: int
    started_ms: int
    heartbeat_ms: int


class SlotTable:
    def __init__(self, slots: int):
        self.slots = slots
        self._mm = mmap.mmap(-1, max(_SLOT_BYTES * slots, mmap.PAGESIZE), flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def read(self, slot: int) -> Slot:
        return Slot(*_FIELDS.unpack_from(self._mm, slot * _SLOT_BYTES))

    def write(self, slot: int, *, pid: int, state: int, generation: int, restarts: int, started_ms: int) -> None:
        heartbeat = self.read(slot).heartbeat_ms
        _FIELDS.pack_into(self._mm, slot * _SLOT_BYTES, pid, state, generation, restarts, started_ms, heartbeat)

    def set_state(self, slot: int, state: int) -> None:
        current = self.read(slot)
        self.write(slot, pid=current.pid, state=state, generation=current.generation,
                   restarts=current.restarts, started_ms=current.started_ms)

    def beat(self, slot: int, now_ms: int) -> None:
        struct.pack_into("<q", self._mm, slot * _SLOT_BYTES + _HEARTBEAT_AT, now_ms)
