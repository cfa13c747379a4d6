"""The modern consumer groups' snapshot: what the acceptor's group coordinator holds,
published for the metrics exporter (``metrics.enable``) in shared memory.

The coordinator's state lives in the acceptor's memory. Every ``PUBLISH_MS`` the
acceptor encodes a small summary (``acceptor/kafka/group_metrics.py``: the groups it
coordinates, each one's state, members, committed offsets and lag, within caps) and
stores it here; the exporter reads the latest at each scrape. One writer (the acceptor
of the moment), any number of readers, no locks: a sequence word is odd while the
writer stores (a seqlock), and a reader that finds it odd, or changed by the time it
has copied the bytes, reads again. The stores and loads go through a typed memoryview
in order, and x86-64 keeps that order (as for the rings). An acceptor killed in the
middle of a store leaves the word odd: readers find nothing until its successor's
first publish, which starts from that odd value.

Layout: sequence, length, published at (``time.monotonic`` in ms: one clock for every
process of the machine), 8 bytes each, then the bytes (UTF-8 JSON).
"""

import mmap

# The caps on what a snapshot holds, so the metrics' cardinality stays bounded whatever the
# clients do: the first MAX_GROUPS groups by id, the first MAX_PARTITIONS committed partitions
# in all (by group, topic, partition); what is left out is counted.
MAX_GROUPS = 100
MAX_PARTITIONS = 2000
HEADER_WORDS = 3
HEADER_BYTES = HEADER_WORDS * 8
SNAPSHOT_BYTES = 1 << 20
READ_ATTEMPTS = 100


class GroupSnapshot:
    def __init__(self, size: int = SNAPSHOT_BYTES):
        self._map = mmap.mmap(-1, size)
        self._words = memoryview(self._map)[:HEADER_BYTES].cast("Q")
        self._data = memoryview(self._map)[HEADER_BYTES:]
        self.capacity = size - HEADER_BYTES

    def publish(self, data: bytes, now_ms: int) -> bool:
        """Store ``data`` as the latest snapshot (False, nothing stored, when it is larger
        than ``capacity``)."""
        if len(data) > self.capacity:
            return False
        words = self._words
        writing = words[0] | 1  # odd: readers wait (already odd after a writer's death)
        words[0] = writing
        self._data[:len(data)] = data
        words[1] = len(data)
        words[2] = now_ms
        words[0] = writing + 1
        return True

    def read(self):
        """``(bytes, published at in monotonic ms)`` of the latest snapshot, or None
        (nothing published yet, or no consistent copy after a few attempts)."""
        words = self._words
        for _ in range(READ_ATTEMPTS):
            sequence = words[0]
            if sequence & 1:
                continue
            length, published_ms = words[1], words[2]
            if length > self.capacity:
                continue
            data = bytes(self._data[:length])
            if words[0] == sequence:
                return (data, published_ms) if sequence else None
        return None
