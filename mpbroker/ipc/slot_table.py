"""The state of every worker slot (and the acceptor), in shared memory.

The supervisor writes pid, state, generation, restarts and start time (a date); the
process in the slot writes its heartbeat (``clock.monotonic_ms``, one clock for the
whole machine, so a step of the date never makes a live child look dead) and, for the
registrar, its ZooKeeper lease (below), nothing else. Readers: the
supervisor (liveness, status) and the acceptor (which slots take requests after it
was itself respawned). Every field is one aligned 8-byte word, loaded and stored
whole through a typed memoryview, so a reader never sees half a value.
"""

import mmap
from enum import IntEnum
from typing import NamedTuple

_SLOT_WORDS = 8  # 64 bytes per slot: pid, state, generation, restarts, started_ms, heartbeat_ms, lease, roles seq
_HEARTBEAT = 5
_LEASE = 6
_ROLES_SEQ = 7
_STATE = 1


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
        self._mm = mmap.mmap(-1, max(_SLOT_WORDS * 8 * slots, mmap.PAGESIZE), flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._words = memoryview(self._mm).cast("q")

    def read(self, slot: int) -> Slot:
        base = slot * _SLOT_WORDS
        words = self._words
        return Slot(*(words[base + field] for field in range(6)))

    def write(self, slot: int, *, pid: int, state: int, generation: int, restarts: int, started_ms: int) -> None:
        """Everything but the heartbeat (which belongs to the process in the slot)."""
        base = slot * _SLOT_WORDS
        words = self._words
        for field, value in enumerate((pid, state, generation, restarts, started_ms)):
            words[base + field] = value

    def set_state(self, slot: int, state: int) -> None:
        self._words[slot * _SLOT_WORDS + _STATE] = state

    def beat(self, slot: int, now_ms: int) -> None:
        self._words[slot * _SLOT_WORDS + _HEARTBEAT] = now_ms

    # --- the registrar's ZooKeeper lease ------------------------------------------

    def renew_lease(self, slot: int, until_ms: int) -> None:
        """The registrar in ``slot``: its ZooKeeper session is surely alive until
        ``until_ms`` (``clock.monotonic_ms``). The leaders of replicated partitions take
        and acknowledge produces only before it (``workers.replication``)."""
        self._words[slot * _SLOT_WORDS + _LEASE] = until_ms

    def lease(self, slot: int) -> int:
        return self._words[slot * _SLOT_WORDS + _LEASE]

    def set_roles_seq(self, slot: int, seq: int) -> None:
        """The registrar in ``slot`` is about to send the ``roles`` message ``seq``: a
        worker that has not applied it yet takes no produce (its role may be stale)."""
        self._words[slot * _SLOT_WORDS + _ROLES_SEQ] = seq

    def roles_seq(self, slot: int) -> int:
        return self._words[slot * _SLOT_WORDS + _ROLES_SEQ]
