"""Which worker slot owns a partition: a stable hash of (topic, partition).

The same function runs in the acceptor (routing) and in the workers (which logs to
open), and gives the same answer in every process and on every start with the same
``num.workers``: xxhash64 of ``b"<topic>\\0<partition>"``, modulo the worker count.
"""

import xxhash


def owner_slot(topic: str, partition: int, num_workers: int) -> int:
    digest = xxhash.xxh64_intdigest(f"{topic}\0{partition}".encode("ascii"))
    return digest % num_workers
