"""A consumer in a group that commits while it reads, for the commit power-cut test
(``tests/faults/test_commit_power_cut.py``); run as a process of its own, killed with
SIGKILL when the broker's power is cut, so that nothing of it (a commit it would send
again once the coordinator is back) outlives its cycle.

    python -m tests.faults.power_cut.committer BOOTSTRAP TOPIC GROUP SEED

confluent-kafka, no auto commit. Every one to four messages read it commits the
positions of every partition it has read from: synchronously (``commit(asynchronous=
False)``) or asynchronously (answered through ``on_commit``; at most ``MAX_ASYNC`` in
flight). Every commit the broker answered without error is printed, a line a commit,
flushed at once:

    answered <partition>:<offset> ...

and ``assigned <partitions>`` once the group gave it partitions. Offsets only grow, so
the latest answered commit of a partition is its highest answered offset.
"""

import random
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition

MAX_ASYNC = 8  # asynchronous commits in flight at most
SYNC_SHARE = 0.3  # of the commits, this share synchronous
COMMIT_EVERY = (1, 4)  # a commit after this many messages (uniform)


class Committer:
    def __init__(self, bootstrap: str, topic: str, group: str, seed: int):
        self.topic = topic
        self.rng = random.Random(seed)
        self.positions = {}  # partition -> next offset to read
        self.in_flight = 0  # asynchronous commits not answered yet
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "on_commit": self.on_commit,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "socket.timeout.ms": 10000,
            # Small fetches, little read ahead: the partitions' messages come interleaved.
            "max.partition.fetch.bytes": 1024, "queued.min.messages": 20,
        })

    def on_assign(self, consumer, partitions) -> None:
        print("assigned", " ".join(str(tp.partition) for tp in partitions), flush=True)

    def on_commit(self, error, partitions) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if error is None:
            self.answered(partitions)

    def answered(self, partitions) -> None:
        offsets = [f"{tp.partition}:{tp.offset}" for tp in partitions if tp.error is None and tp.offset >= 0]
        if offsets:
            print("answered", *offsets, flush=True)

    def take(self, message) -> bool:
        """Note a message read (its partition's position); False for none or an error."""
        if message is None or message.error():
            return False
        self.positions[message.partition()] = message.offset() + 1
        return True

    def run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self.on_assign)
        until_commit = self.rng.randint(*COMMIT_EVERY)
        while True:
            if not self.take(self.consumer.poll(0.1)):
                continue
            until_commit -= 1
            if until_commit > 0:
                continue
            until_commit = self.rng.randint(*COMMIT_EVERY)
            offsets = [TopicPartition(self.topic, partition, offset) for partition, offset in self.positions.items()]
            if self.rng.random() < SYNC_SHARE:
                try:
                    self.answered(self.consumer.commit(offsets=offsets, asynchronous=False))
                except KafkaException:
                    pass  # not answered (the broker is down): not durable, maybe
            else:
                while self.in_flight >= MAX_ASYNC:
                    self.take(self.consumer.poll(0.01))  # serves on_commit
                self.in_flight += 1
                self.consumer.commit(offsets=offsets, asynchronous=True)


if __name__ == "__main__":
    bootstrap, topic, group, seed = sys.argv[1:5]
    Committer(bootstrap, topic, group, int(seed)).run()
