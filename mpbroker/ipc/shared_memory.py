"""Everything the broker's processes share through memory, made at once by the
supervisor before it forks (so a respawned child maps the same pages): per worker a
request ring (acceptor -> worker), an answer ring (worker -> acceptor, a quarter of
the size, at least 1 MiB) and a partition table; one slot table and one counter table
with a row per process slot (the workers, the acceptor, the registrar, the metrics
exporter); with the metrics endpoint, the modern consumer groups' snapshot (acceptor
-> exporter)."""

from mpbroker.ipc.counters import CounterTable
from mpbroker.ipc.group_snapshot import GroupSnapshot
from mpbroker.ipc.partition_table import PartitionTable
from mpbroker.ipc.ring import Ring
from mpbroker.ipc.slot_table import SlotTable

PARTITIONS_PER_WORKER = 32768
PROCESS_SLOTS_BEYOND_WORKERS = 3  # the acceptor, the registrar, the metrics exporter


class SharedMemory:
    def __init__(self, workers: int, ring_bytes: int, group_snapshot: bool = False):
        self.request_rings = [Ring(ring_bytes) for _ in range(workers)]
        self.answer_rings = [Ring(max(1 << 20, ring_bytes // 4)) for _ in range(workers)]
        self.tables = [PartitionTable(PARTITIONS_PER_WORKER) for _ in range(workers)]
        self.slots = SlotTable(workers + PROCESS_SLOTS_BEYOND_WORKERS)
        self.counters = CounterTable(workers + PROCESS_SLOTS_BEYOND_WORKERS)
        self.group_snapshot = GroupSnapshot() if group_snapshot else None

    def reset_worker_rings(self, slot: int) -> None:
        """Empty a dead worker's rings before its successor starts."""
        self.request_rings[slot].reset()
        self.answer_rings[slot].reset()
