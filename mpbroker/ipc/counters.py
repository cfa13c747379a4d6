"""Counters in shared memory: what the acceptor, the workers and the registrar count
for the metrics endpoint (requests, bytes in and out, connections, flushes and their
latency, ISR changes, the controller flag).

One row of 8-byte words per process slot, in anonymous shared memory the supervisor
makes before forking. The process in a slot is the only writer of its row, from its
main thread; the metrics exporter reads every row. A row outlives its process, so a
respawned worker or acceptor keeps counting from where its predecessor stopped and
the totals never go backwards. Each word is loaded and stored whole through a typed
memoryview (x86-64), so a reader never sees half a value; a reader may see one
counter of a group (a histogram's buckets and its sum) a little ahead of another.

Hot paths increment a word in place (``row[BYTES_RECEIVED] += n``, about 75 ns).
"""

import bisect
import mmap

ROW_WORDS = 48

# --- the acceptor's row ---------------------------------------------------------------
REQUEST_KINDS = ("produce", "fetch", "multifetch", "multiproduce", "offsets", "produce_acked")
REQUESTS = 0  # REQUESTS + index in REQUEST_KINDS: requests received of that kind
MALFORMED_REQUESTS = 6  # requests refused as malformed (the connection is closed)
BYTES_RECEIVED = 7
BYTES_SENT = 8  # from buffers and from segment files (sendfile)
CONNECTIONS_ACCEPTED = 9
CONNECTIONS_REFUSED = 10  # max.connections reached, or out of file descriptors
CONNECTIONS_OPEN = 11  # a gauge: the acceptor stores its current number
# The modern listener: requests per API (by key: 0 Produce, 1 Fetch, 2 ListOffsets, 3 Metadata,
# 8 OffsetCommit, 9 OffsetFetch, 10 FindCoordinator, 11 JoinGroup, 12 Heartbeat, 13 LeaveGroup,
# 14 SyncGroup, 15 DescribeGroups, 16 ListGroups, 18 ApiVersions, 19 CreateTopics,
# 20 DeleteTopics, 22 InitProducerId, 29 DescribeAcls, 32 DescribeConfigs, 42 DeleteGroups).
MODERN_API_KEYS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 29, 32, 42)
KAFKA_REQUESTS = 12  # KAFKA_REQUESTS + index in MODERN_API_KEYS: modern requests of that API
KAFKA_CONNECTIONS_ACCEPTED = KAFKA_REQUESTS + len(MODERN_API_KEYS)  # of CONNECTIONS_ACCEPTED, on kafka.port
KAFKA_CONNECTIONS_OPEN = KAFKA_CONNECTIONS_ACCEPTED + 1  # a gauge: of CONNECTIONS_OPEN, on kafka.port

assert KAFKA_CONNECTIONS_OPEN < ROW_WORDS

# --- a worker's row -------------------------------------------------------------------
FLUSHES = 0
FLUSH_FAILURES = 1
FLUSH_MICROSECONDS = 2  # the sum of every flush's duration
FLUSH_BUCKETS = 3  # FLUSH_BUCKETS + i: flushes that took <= FLUSH_BOUNDS_S[i] (and more than the bound before)
FLUSH_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# ... and FLUSH_BUCKETS + len(FLUSH_BOUNDS_S): flushes slower than the last bound
ISR_SHRINKS = FLUSH_BUCKETS + len(FLUSH_BOUNDS_S) + 1  # ISRs of partitions led here that lost members
ISR_EXPANDS = ISR_SHRINKS + 1  # ... and that gained members

assert ISR_EXPANDS < ROW_WORDS

# --- the registrar's row --------------------------------------------------------------
CONTROLLER = 0  # a gauge: 1 while this broker is the controller
CONTROLLER_EPOCH = 1  # a gauge: its controller epoch then (0 otherwise)


class CounterTable:
    def __init__(self, slots: int):
        self.slots = slots
        size = max(slots * ROW_WORDS * 8, mmap.PAGESIZE)
        self._mm = mmap.mmap(-1, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._words = memoryview(self._mm).cast("Q")

    def row(self, slot: int) -> memoryview:
        """The words of one slot, for its process to write and anyone to read."""
        return self._words[slot * ROW_WORDS:(slot + 1) * ROW_WORDS]

    def read(self, slot: int) -> tuple:
        return tuple(self.row(slot))


def record_flush(row: memoryview, seconds: float, failed: bool) -> None:
    """Count one flush of ``seconds`` in a worker's row."""
    row[FLUSHES] += 1
    if failed:
        row[FLUSH_FAILURES] += 1
    row[FLUSH_MICROSECONDS] += int(seconds * 1_000_000)
    row[FLUSH_BUCKETS + bisect.bisect_left(FLUSH_BOUNDS_S, seconds)] += 1
