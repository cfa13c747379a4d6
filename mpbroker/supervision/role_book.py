"""The replica roles the registrar read from ZooKeeper, kept by the supervisor and
handed to the processes that act on them.

The registrar sends ``roles`` messages with what changed; the supervisor keeps the
latest entry of each partition and the replicated topics, so that a respawned worker
gets its partitions' roles (and a respawned acceptor the topics) as soon as it is
ready, without asking ZooKeeper. The first topics, even none, always go to the
acceptor: until then it serves no topic that has leader epochs on disk. Each worker
gets only the partitions it owns (``ownership.owner_slot``): the one-owner-per-partition
rule holds for replication too.
"""

from mpbroker.ownership import owner_slot


class RoleBook:
    def __init__(self, num_workers: int):
        self.num_workers = num_workers
        self.topics = {}  # replicated topic -> partition count
        self.known = False  # a roles message with the topics came (the acceptor waits for one)
        self.partitions = {}  # (topic, partition) -> the registrar's entry
        self.seq = 0  # the number of the last complete roles message

    def apply(self, message: dict) -> tuple:
        """Record a ``roles`` message; ``(topics changed?, {worker slot: [entries]})``."""
        topics_changed = False
        if "topics" in message and (message["topics"] != self.topics or not self.known):
            self.topics = dict(message["topics"])
            self.known = topics_changed = True
        by_slot = {}
        for entry in message.get("partitions", ()):
            key = (entry["topic"], entry["partition"])
            if entry["role"] == "none":
                self.partitions.pop(key, None)
            else:
                self.partitions[key] = entry
            by_slot.setdefault(self.owner(*key), []).append(entry)
        if "seq" in message:
            self.seq = message["seq"]
        return topics_changed, by_slot

    def owner(self, topic: str, partition: int) -> int:
        return owner_slot(topic, partition, self.num_workers)

    def for_worker(self, slot: int) -> list:
        return [entry for key, entry in self.partitions.items() if self.owner(*key) == slot]


ENTRIES_PER_MESSAGE = 1000  # a control message is at most 1 MiB; an entry is ~150 bytes of JSON


def chunks(entries: list) -> list:
    """``entries`` in lists small enough for one control message each."""
    return [entries[start:start + ENTRIES_PER_MESSAGE] for start in range(0, len(entries), ENTRIES_PER_MESSAGE)]
