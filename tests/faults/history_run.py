"""A hand-written run for the history checker's tests: a log per partition that appends
really happen to, and the History of what producers and consumers did and saw. The
example tests (test_history_checker.py) and the model property
(test_history_checker_model.py) build their histories with it."""

from collections import defaultdict

from mpbroker.codec.message import encode_message
from tests.faults.netcluster.checker import check
from tests.faults.netcluster.history import History
from tests.faults.netcluster.history_records import FAILED, INDETERMINATE, OK

TOPIC = "t"


class Run:
    """A hand-written run: a log per partition that appends really happen to, and the
    history of what the producers and consumers did and saw."""

    def __init__(self, seed=1):
        self.history = History(seed=seed)
        self.logs = defaultdict(list)  # partition -> [(offset, next_offset, payload)]
        self.clock = 0.0

    def tick(self) -> float:
        self.clock += 1.0
        return self.clock

    def end(self, partition: int) -> int:
        log = self.logs[partition]
        return log[-1][1] if log else 0

    def append(self, partition: int, payloads) -> tuple:
        start = self.end(partition)
        offset = start
        for payload in payloads:
            next_offset = offset + len(encode_message(payload))
            self.logs[partition].append((offset, next_offset, payload))
            offset = next_offset
        return start, offset

    def produce(self, producer, payloads, durability=2, outcome=OK, appended=None, partition=0, retry_of=None,
                code=None) -> int:
        """One attempt; ``appended`` defaults to True for ok and False otherwise."""
        history = self.history
        attempt = history.begin_produce(producer, TOPIC, partition, durability, payloads, broker=1,
                                        retry_of=retry_of, start=self.tick())
        appended = outcome == OK if appended is None else appended
        offset, next_offset = self.append(partition, payloads) if appended else (None, None)
        if outcome == OK:
            history.produce_ok(attempt, offset, next_offset, end=self.tick())
        elif outcome == FAILED:
            history.produce_error(attempt, code or 2, end=self.tick())
        elif outcome == INDETERMINATE:
            if code:
                history.produce_error(attempt, code, end=self.tick())
            else:
                history.produce_exception(attempt, TimeoutError("timed out"), end=self.tick())
        return attempt

    def read(self, reader, partition=0, start=0, stop=None, broker=1):
        for offset, next_offset, payload in self.logs[partition][start:stop]:
            self.history.record_read(reader, TOPIC, partition, offset, next_offset, payload, broker=broker,
                                     role="leader", at=self.tick())

    def finish(self, partitions=(0,), replicas=(1, 2, 3)) -> History:
        """The final reads and replica logs, all equal to the model's logs."""
        for partition in partitions:
            log = self.logs[partition]
            self.history.record_final_read(TOPIC, partition, 1, log, at=self.tick())
            data = log_bytes(log)
            for broker in replicas:
                self.history.record_replica_log(TOPIC, partition, broker, data, len(data), at=self.tick())
        return self.history


def log_bytes(entries) -> bytes:
    return b"".join(encode_message(payload) for _, _, payload in entries)


def payloads(producer, seq, count=2):
    return [f"p{producer}-{seq}-{i}".encode() for i in range(count)]


def failures(history) -> set:
    return set(check(history).failures())

