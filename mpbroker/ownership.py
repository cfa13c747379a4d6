"""Which worker slot owns a partition: a stable function of (topic, partition).

The same function runs in the acceptor (routing) and in the workers (which logs to
open), and gives the same answer in every process and on every start with the same
``num.workers``: ``(xxhash64(topic) + partition) % num.workers``. Hashing the topic
spreads topics over the workers; adding the partition puts a topic's consecutive
partitions on consecutive workers, so every topic is balanced over the workers
(hashing the pair instead can leave a 2-partition topic on a single worker).
"""

import xxhash


def owner_slot(topic: str, partition: int, num_workers: int) -> int:
    return (xxhash.xxh64_intdigest(topic.encode("ascii")) + partition) % num_workers
