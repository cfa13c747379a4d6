"""Producer ids for InitProducerId: a standalone broker hands them out from blocks it
reserves durably in ``log.dir``, so that no id is ever handed out twice, across
restarts and crashes included (KIP-98; Kafka's ``ProducerIdManager``).

An idempotent producer without a ``transactional.id`` gets a brand-new id with epoch 0
at each InitProducerId (Kafka's ``TransactionCoordinator.handleInitProducerId`` does
the same, even when the request names an id it had). A partition keys its producers'
state by id (``mpbroker.workers.producer_state``), so an id handed out again would
merge two producers' sequences.

Ids come in blocks of 1000 (Kafka's ``PRODUCER_ID_BLOCK_SIZE``): before the first id of
a block is handed out, the block is written to ``<log.dir>/producer-id-block``,
replaced atomically and durably (``durability.replace_file``: two fsyncs, once per
1000 ids). After a restart, a crash, or the respawn of its one caller (the acceptor),
the next block starts after the one on file: what the old block had left is skipped,
never reused. The file is Kafka's ``/latest_producer_id_block`` node value (JSON:
version 1, the broker id, the block's first and last id as strings). A file that does
not parse is refused (``LogCorruptError`` naming it) rather than guessed: a guess could
hand out ids again. With the file removed the ids start again at 0 and could meet
producers' state still in the logs.

A cluster must allocate its blocks in one place (Kafka: the ``/latest_producer_id_block``
ZooKeeper node, updated with a version check; KRaft: the controller); this file is for
one broker alone. A lock makes ``next_id`` safe for the threads of one process; one
process (the acceptor) uses it.
"""

import json
import os
import threading

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.segments.durability import replace_file

FILE_NAME = "producer-id-block"
BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
VERSION = 1
MAX_PRODUCER_ID = (1 << 63) - 1


class ProducerIdsExhaustedError(StorageError):
    """Every producer id (up to 2^63 - 1) was handed out."""


class ProducerIdAllocator:
    def __init__(self, log_dir: str, broker_id: int = -1, block_size: int = BLOCK_SIZE):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, not {block_size}")
        self.path = os.path.join(log_dir, FILE_NAME)
        self.broker_id = broker_id
        self.block_size = block_size
        self._lock = threading.Lock()
        self._block_start = 0  # the block in hand: its first id ...
        self._block_end = -1  # ... and its last (-1: none yet)
        self._next = 0  # the next id to hand out, while it is <= self._block_end

    def next_id(self) -> int:
        """A producer id never handed out before (its epoch is 0). Reserves a new block
        first when the current one is used up (blocking: two fsyncs); raises
        StorageError when the block cannot be reserved (nothing is handed out) and
        LogCorruptError when the file does not parse."""
        with self._lock:
            if self._next > self._block_end:
                self._reserve()
            producer_id = self._next
            self._next += 1
            return producer_id

    def reserve(self) -> None:
        """Reserve a block now unless one is in hand (at start, off the request path)."""
        with self._lock:
            if self._next > self._block_end:
                self._reserve()

    @property
    def block(self) -> tuple:
        """``(first id, last id)`` of the block in hand, or ``(0, -1)`` before the first."""
        return self._block_start, self._block_end

    def _reserve(self) -> None:
        last_end = read_block_end(self.path)
        start = last_end + 1
        if start > MAX_PRODUCER_ID:
            raise ProducerIdsExhaustedError(f"{self.path}: every producer id was handed out (the last block ended "
                                            f"at {last_end})")
        end = min(start + self.block_size - 1, MAX_PRODUCER_ID)
        text = json.dumps({"version": VERSION, "broker": self.broker_id,
                           "block_start": str(start), "block_end": str(end)})
        try:
            replace_file(self.path, text.encode("ascii") + b"\n")
        except OSError as exc:
            raise StorageError(f"cannot reserve producer ids {start}-{end} in {self.path}: "
                               f"{exc.strerror or exc}") from exc
        self._block_start, self._block_end, self._next = start, end, start


def read_block_end(path: str) -> int:
    """The last id of the block on file at ``path``; -1 when there is no file."""
    try:
        with open(path, encoding="ascii") as file:
            text = file.read()
    except FileNotFoundError:
        return -1
    except (OSError, UnicodeDecodeError) as exc:
        raise LogCorruptError(f"cannot read the producer id block {path}: {exc}") from exc
    try:
        value = json.loads(text)
        start, end = int(value["block_start"]), int(value["block_end"])
        if value["version"] != VERSION or not 0 <= start <= end <= MAX_PRODUCER_ID:
            raise ValueError("version or bounds")
    except (ValueError, TypeError, KeyError) as exc:
        raise LogCorruptError(f"{path} is not a producer id block ({exc}; the file holds {text[:200]!r}). Nothing "
                              "was handed out; restore it, or write a block ending past every producer id in the "
                              "logs") from exc
    return end
