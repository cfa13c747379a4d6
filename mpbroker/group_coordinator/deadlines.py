"""The coordinator's deadlines: one heap for every group's session, join, sync and
pending-member timeouts, so a tick costs what is due, not the number of groups.

Entries are not removed when the deadline they stand for moves or goes away: the
owner says, when one comes to the top, whether it still stands and when (lazy
invalidation; a session renewed by heartbeats costs nothing until its entry comes up).
``compact`` rebuilds the heap from the standing entries; the coordinator calls it when
the heap has doubled since the last rebuild."""

import heapq
import itertools
import math


class Deadlines:
    __slots__ = ("_heap", "_sequence", "_due_at")

    def __init__(self, due_at):
        """``due_at(entry)``, for an entry ``(at, seq, kind, group, ref, token)``: None
        if its deadline no longer stands, else when it does now (``at``, or later when
        it moved; the entry is then moved there)."""
        self._heap = []
        self._sequence = itertools.count()
        self._due_at = due_at

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, at: float, kind: str, group, ref=None, token=None) -> None:
        heapq.heappush(self._heap, (at, next(self._sequence), kind, group, ref, token))

    def _settle_top(self) -> None:
        """Drop or move entries on top until the top one stands where it is."""
        heap = self._heap
        while heap:
            entry = heap[0]
            at = self._due_at(entry)
            if at == entry[0]:
                return
            heapq.heappop(heap)
            if at is not None:
                heapq.heappush(heap, (at,) + entry[1:])

    def pop_due(self, now_ms: float):
        """The next standing entry due at ``now_ms`` or before, or None."""
        self._settle_top()
        if self._heap and self._heap[0][0] <= now_ms:
            return heapq.heappop(self._heap)
        return None

    def next_at(self) -> float:
        """The earliest standing deadline (math.inf if none)."""
        self._settle_top()
        return self._heap[0][0] if self._heap else math.inf

    def compact(self) -> None:
        """Rebuild the heap from its standing entries, each at its current time."""
        kept = []
        for entry in self._heap:
            at = self._due_at(entry)
            if at is not None:
                kept.append((at,) + entry[1:])
        heapq.heapify(kept)
        self._heap = kept
