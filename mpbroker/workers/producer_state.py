"""Idempotent producers in a worker: per partition, what each producer id appended last,
so that a retried batch is answered with its first offset instead of being written
twice, and a batch after a gap or from a fenced epoch is refused (KIP-98; Kafka's
``ProducerStateManager``, ``ProducerStateEntry`` and ``ProducerAppendInfo``).

A batch with a producer id (>= 0) carries the producer's epoch and the sequence of its
first record; its records take the sequences from there on, wrapping from 2^31 - 1 to
0 as Kafka's do. For each producer id a partition keeps its epoch and its last 5
batches (Kafka's ``NUM_BATCHES_TO_RETAIN``, the bound on a producer's
``max.in.flight.requests.per.connection`` with idempotence): first and last sequence,
first offset (q - n for a batch stored at [p, q) with n records) and last offset
(q - 1). ``check`` judges a batch against that, as Kafka's leader does for a client:

- DUPLICATE: the producer's current epoch and the first and last sequence of one of its
  last 5 batches: a retry of a batch that was written. It is not written again; the
  answer is the original batch's first offset (Kafka's ``findDuplicateBatch``).
- INVALID_PRODUCER_EPOCH (47): an epoch below the producer's latest, retry or not
  (``checkProducerEpoch``; the code is 47 throughout, raised as ProducerFencedException
  before Kafka 2.7 and as InvalidProducerEpochException since, KIP-588).
- APPEND: the current epoch and the sequence after the last batch's, or a newer epoch
  starting at sequence 0 (a producer that bumped its epoch: KIP-360's client-side bump
  after a timeout starts the sequences again), or a producer id with no state here.
- OUT_OF_ORDER_SEQUENCE_NUMBER (45): anything else: a gap, a newer epoch not starting
  at 0, and a retry older than the last 5 batches (not found among them, and not the
  next sequence: Kafka answers the same, ``checkSequence``).

A producer id with no state here is accepted at any sequence, not refused with
UNKNOWN_PRODUCER_ID (59). That is Kafka's behaviour since 2.5 (KIP-360): 0.11 to 2.4
answered 59 to a non-zero sequence when the producer's records had all been removed
(retention, DeleteRecords), and the producer reset its sequences, which could reorder
or duplicate; ``ProducerAppendInfo.checkSequence`` now "accept[s] writes with any
sequence number" when there is no current epoch, and Kafka 4 still does (for a
producer without transactions v2). Here a producer has no state after its entry was
evicted (below) or after a restart that replayed no batch of it; answering 59 would
make its retries fail or its records reorder where Kafka's clients expect success.

The several batches of one produce are judged in order, each against the state as it
would be after the earlier ones (``check_produce``); the first verdict that is not
APPEND is the whole produce's, and none of its batches is written (Kafka answers a
request with a duplicate batch with that batch's offsets and writes nothing; Kafka's
clients send one batch per partition per request). What is checked but not yet
appended lives in ``ProducerAppends`` layers over the partition's ``ProducerStates``:
they are committed once the append succeeded, and dropped when it failed.

Rebuilding: the state is in memory only. After a restart or a leader change
(``rebuild_from_log``) every stored batch header is replayed oldest first
(``Log.batch_headers``, no records read), each batch recorded as it is in the log,
without checks (Kafka's REPLICATION origin). Measured on this project's 2-core VM:
~0.7 us per batch walked plus ~1.4 us per batch with a producer id, so ~1 s per
500,000 idempotent batches, the whole log by default; ``from_offset`` bounds the walk
to the last segments at the price of forgetting producers idle for longer, which are
then accepted at any sequence (above). Kafka bounds the walk with a snapshot file per
segment (``<offset>.snapshot``); none is written here yet (recovery warns about
unknown files in a partition directory, and a snapshot must be cut with the log on
truncation and retention). Judging costs ~2 us per idempotent batch appended and
~0.2 us for a produce without one.

Expiry: Kafka forgets a producer after ``producer.id.expiration.ms`` (KIP-854, Kafka
3.4: 1 day; before, ``transactional.id.expiration.ms``, 7 days) without a write, and
those whose last batch retention deleted. Here a partition keeps at most
``max_producers`` (default 100,000) and evicts the least recently appended past that;
an evicted producer is then unknown (accepted at any sequence), so only a retry of a
producer silent through 100,000 others' first writes goes undetected. Memory: about
1 KB per producer with 5 batches retained (100 MB at the bound), ~370 bytes for a
producer of one batch; producers that live for one batch each (InitProducerId per
process) are what fills it.

Transactions are not kept (no ongoing transaction, no last stable offset, no control
batches: a client's control batch is refused by validation). Sans-IO but for the
walk of ``rebuild_from_log``; used by the partition's owner only.
"""

from collections import OrderedDict
from enum import Enum
from typing import NamedTuple

from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.records.batch import PREFIX_SIZE

SEQUENCE_LIMIT = 1 << 31  # sequences run 0 .. 2^31 - 1, then wrap to 0 (Kafka's int32)
BATCHES_RETAINED = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_MAX_PRODUCERS = 100_000


class Outcome(Enum):
    APPEND = "APPEND"
    DUPLICATE = "DUPLICATE"
    OUT_OF_ORDER_SEQUENCE_NUMBER = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    INVALID_PRODUCER_EPOCH = "INVALID_PRODUCER_EPOCH"


_ERRORS = {
    Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,  # 45
    Outcome.INVALID_PRODUCER_EPOCH: KafkaError.INVALID_PRODUCER_EPOCH,  # 47
}


class Verdict(NamedTuple):
    outcome: Outcome
    first_offset: int = -1  # DUPLICATE: the offsets of the batch written first
    last_offset: int = -1
    reason: str = ""  # a refusal's

    @property
    def error(self) -> int:
        """The Kafka error code to answer with: 0 (NONE) for APPEND and DUPLICATE."""
        return _ERRORS.get(self.outcome, 0)

    @property
    def next_offset(self) -> int:
        """DUPLICATE: the end of the original batch's bytes (its last offset + 1), what a
        flush or the followers must reach before the retry is acknowledged."""
        return self.last_offset + 1


APPEND = Verdict(Outcome.APPEND)


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int  # q - n
    last_offset: int  # q - 1


class ProducerEntry(NamedTuple):
    """One producer id's state in a partition (immutable: changes make a new one)."""

    epoch: int
    batches: tuple  # its last BATCHES_RETAINED BatchMetadata of this epoch, oldest first


def last_sequence(base_sequence: int, records: int) -> int:
    """The sequence of a batch's last record (Kafka's ``incrementSequence``: wraps)."""
    return (base_sequence + records - 1) % SEQUENCE_LIMIT


def judge(entry: ProducerEntry | None, batch) -> Verdict:
    """The verdict on ``batch`` (a ``BatchInfo`` or ``BatchHeader`` with a producer id)
    for a producer whose state is ``entry`` (None: none here)."""
    if entry is None:
        return APPEND  # KIP-360: no state, any sequence (module docstring)
    epoch = batch.producer_epoch
    first = batch.base_sequence
    if epoch == entry.epoch:
        last = last_sequence(first, batch.records)
        for kept in entry.batches:
            if kept.first_sequence == first and kept.last_sequence == last:
                return Verdict(Outcome.DUPLICATE, kept.first_offset, kept.last_offset)
        expected = (entry.batches[-1].last_sequence + 1) % SEQUENCE_LIMIT if entry.batches else 0
        if first == expected:
            return APPEND
        return Verdict(Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER,
                       reason=f"producer {batch.producer_id} epoch {epoch}: sequence {first}, expected {expected}")
    if epoch < entry.epoch:
        return Verdict(Outcome.INVALID_PRODUCER_EPOCH,
                       reason=f"producer {batch.producer_id}: epoch {epoch} is older than its epoch {entry.epoch}")
    if first == 0:
        return APPEND
    return Verdict(Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER,
                   reason=f"producer {batch.producer_id}: its new epoch {epoch} (after {entry.epoch}) starts at "
                          f"sequence {first}, not 0")


def with_batch(entry: ProducerEntry | None, batch, first_offset: int) -> ProducerEntry:
    """``entry`` after ``batch`` was stored with its first record at ``first_offset``:
    a new epoch forgets the batches of the old one (Kafka's ``maybeUpdateProducerEpoch``)."""
    epoch = batch.producer_epoch
    kept = entry.batches[1 - BATCHES_RETAINED:] if entry is not None and entry.epoch == epoch else ()
    records = batch.records
    return ProducerEntry(epoch, kept + (BatchMetadata(batch.base_sequence, last_sequence(batch.base_sequence, records),
                                                      first_offset, first_offset + records - 1),))


class _Judging:
    """What ``ProducerStates`` and its ``ProducerAppends`` layers share."""

    def entry(self, producer_id: int) -> ProducerEntry | None:
        raise NotImplementedError

    def _put(self, producer_id: int, entry: ProducerEntry) -> None:
        raise NotImplementedError

    def check(self, batch) -> Verdict:
        """The verdict on ``batch`` (a validated ``BatchInfo``) about to be appended; a
        batch without a producer id (-1: not idempotent) is always APPEND."""
        if batch.producer_id < 0:
            return APPEND
        return judge(self.entry(batch.producer_id), batch)

    def appended(self, batch, first_offset: int) -> None:
        """Record ``batch`` (a ``BatchInfo`` or ``BatchHeader``), stored with its first
        record at ``first_offset``; one without a producer id is ignored. No check."""
        producer_id = batch.producer_id
        if producer_id >= 0:
            self._put(producer_id, with_batch(self.entry(producer_id), batch, first_offset))

    def begin(self) -> "ProducerAppends":
        """A layer for appends not yet made: judged against this state and the layer's
        own appends, applied here by its ``commit``."""
        return ProducerAppends(self)

    def check_produce(self, batches, position: int) -> Verdict:
        """The verdict on one produce's batches (``BatchInfo`` of its bytes, as
        ``record_batches.checked`` gives them) to be appended at log position
        ``position``, each judged against the state after the ones before it. APPEND:
        all are to be written, and each is recorded here at the offsets its position
        gives (q - n .. q - 1). Otherwise the first other verdict, for the whole
        produce, and nothing is recorded."""
        for batch in batches:
            if batch.producer_id >= 0:
                break
        else:
            return APPEND  # no idempotent batch: the usual case
        if len(batches) == 1:  # one batch a produce, as Kafka's clients send: no layer needed
            verdict = judge(self.entry(batch.producer_id), batch)
            if verdict is APPEND:
                self._put(batch.producer_id, with_batch(self.entry(batch.producer_id), batch,
                                                        position + batch.end - batch.records))
            return verdict
        layer = ProducerAppends(self)
        for batch in batches:
            verdict = layer.check(batch)
            if verdict is not APPEND:
                return verdict
            layer.appended(batch, position + batch.end - batch.records)
        layer.commit()
        return APPEND


class ProducerStates(_Judging):
    """The idempotent producers of one partition (see the module docstring)."""

    def __init__(self, max_producers: int = DEFAULT_MAX_PRODUCERS):
        if max_producers < 1:
            raise ValueError(f"max_producers must be >= 1, not {max_producers}")
        self.max_producers = max_producers
        self.evicted = 0  # producers forgotten for the bound since this was made
        self._entries = OrderedDict()  # producer id -> ProducerEntry, least recently appended first

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def _put(self, producer_id: int, entry: ProducerEntry) -> None:
        entries = self._entries
        entries[producer_id] = entry
        entries.move_to_end(producer_id)
        if len(entries) > self.max_producers:
            entries.popitem(last=False)
            self.evicted += 1

    def clear(self) -> None:
        self._entries.clear()

    def replay(self, headers) -> int:
        """Record every ``(position, BatchHeader)`` of ``headers`` (stored batches, oldest
        first) as it is, unchecked; returns how many had a producer id."""
        count = 0
        appended = self.appended
        for position, header in headers:
            if header.producer_id >= 0:
                appended(header, position + PREFIX_SIZE + header.batch_length - header.records)
                count += 1
        return count

    def rebuild_from_log(self, partition_log, from_offset: int | None = None) -> int:
        """Forget everything, then replay the batches ``partition_log`` (a ``Log`` of
        record batches) stores from the segment holding ``from_offset`` (default: all)
        to its end; on the log's owner, before its next append. Returns how many
        batches had a producer id. LogCorruptError for a damaged header."""
        self.clear()
        return self.replay(partition_log.batch_headers(from_offset))

    @classmethod
    def from_log(cls, partition_log, from_offset: int | None = None,
                 max_producers: int = DEFAULT_MAX_PRODUCERS) -> "ProducerStates":
        states = cls(max_producers)
        states.rebuild_from_log(partition_log, from_offset)
        return states


class ProducerAppends(_Judging):
    """Appends judged and not yet made, over a ``ProducerStates`` or another layer."""

    def __init__(self, base: _Judging):
        self._base = base
        self._updated = {}  # producer id -> ProducerEntry, in the order first updated

    def entry(self, producer_id: int) -> ProducerEntry | None:
        entry = self._updated.get(producer_id)
        return self._base.entry(producer_id) if entry is None else entry

    def _put(self, producer_id: int, entry: ProducerEntry) -> None:
        self._updated[producer_id] = entry

    def commit(self) -> None:
        """Apply this layer's appends to the state below it (they were written)."""
        put = self._base._put
        for producer_id, entry in self._updated.items():
            put(producer_id, entry)
        self._updated = {}
