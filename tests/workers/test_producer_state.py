"""Idempotent producers' state (``workers.producer_state``), on real record batches
(``encode_batch``, ``validate_batches``) at the offsets their log positions give: in
sequence, retries of each of the last 5 batches answered with their first offsets, a
retry older than that, gaps, epoch bumps and fenced epochs, sequences wrapping past
2^31 - 1, several batches in one produce, the bound on producers, and the same
verdicts from the state rebuilt from a real Log after it was closed and reopened."""

import pytest

from mpbroker.codec.errors import LogCorruptError
from mpbroker.records import encode_batch, validate_batches
from mpbroker.records.compression import CODEC_GZIP
from mpbroker.segments import LogConfig
from mpbroker.segments.log import Log
from mpbroker.workers import record_batches
from mpbroker.workers.producer_state import (
    APPEND,
    SEQUENCE_LIMIT,
    Outcome,
    ProducerStates,
    last_sequence,
)

MAX_SEQUENCE = SEQUENCE_LIMIT - 1
NOW_MS = 1_700_000_000_000


def batch(producer_id=-1, epoch=0, sequence=0, count=1, tag=b"v", codec=0) -> bytes:
    records = [(None, b"%s-%d-%d-%d" % (tag, producer_id, sequence, i), (), NOW_MS + i) for i in range(count)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence if producer_id >= 0 else -1, codec=codec)


def infos(data: bytes) -> list:
    return validate_batches(data)


class Partition:
    """A partition's positions without a disk: produces judged, then "appended" at the
    log end as the worker would (offsets q - n .. q - 1)."""

    def __init__(self, states=None, position=1000):
        self.states = ProducerStates() if states is None else states
        self.position = position

    def produce(self, *batches_bytes):
        """(verdict, first offset of the produce if appended)."""
        data = b"".join(batches_bytes)
        batches = infos(data)
        verdict = self.states.check_produce(batches, self.position)
        first = -1
        if verdict is APPEND:
            first = self.position + batches[0].end - batches[0].records
            self.position += len(data)
        return verdict, first


def test_a_batch_without_a_producer_id_is_always_appended_and_not_kept():
    partition = Partition()
    for _ in range(3):
        verdict, _ = partition.produce(batch(count=3))
        assert verdict is APPEND and verdict.error == 0
    assert len(partition.states) == 0


def test_in_sequence_batches_are_appended_and_kept_with_their_offsets():
    partition = Partition()
    offsets = []
    for sequence, count in ((0, 3), (3, 1), (4, 5)):
        data = batch(7, 0, sequence, count)
        verdict, first = partition.produce(data)
        assert verdict is APPEND
        assert first == partition.position - count  # q - n
        offsets.append((first, partition.position - 1))
    entry = partition.states.entry(7)
    assert entry.epoch == 0
    assert [(kept.first_sequence, kept.last_sequence) for kept in entry.batches] == [(0, 2), (3, 3), (4, 8)]
    assert [(kept.first_offset, kept.last_offset) for kept in entry.batches] == offsets


def test_a_retry_of_each_of_the_last_five_batches_is_a_duplicate_with_its_first_offset():
    partition = Partition()
    sent = []
    for index in range(7):
        data = batch(7, 0, 2 * index, 2)
        verdict, first = partition.produce(data)
        assert verdict is APPEND
        sent.append((data, first, partition.position - 1))
    end = partition.position
    for data, first, last in sent[-5:]:
        verdict, _ = partition.produce(data)
        assert verdict.outcome is Outcome.DUPLICATE and verdict.error == 0
        assert (verdict.first_offset, verdict.last_offset, verdict.next_offset) == (first, last, last + 1)
    assert partition.position == end  # nothing written again
    # Older than the last 5: not found, and not the next sequence (Kafka: OutOfOrderSequenceException).
    for data, _, _ in sent[:2]:
        verdict, _ = partition.produce(data)
        assert verdict.outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER and verdict.error == 45
    assert partition.produce(batch(7, 0, 14))[0] is APPEND


def test_a_retry_must_match_both_sequences_of_the_batch():
    partition = Partition()
    partition.produce(batch(7, 0, 0, 3))
    verdict, _ = partition.produce(batch(7, 0, 0, 2))  # same first sequence, other last
    assert verdict.outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_is_out_of_order_and_changes_nothing():
    partition = Partition()
    partition.produce(batch(7, 0, 0, 3))
    before = partition.states.entry(7)
    for sequence in (4, 100, 1, MAX_SEQUENCE):
        verdict, _ = partition.produce(batch(7, 0, sequence))
        assert verdict.outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER and verdict.error == 45
        assert "expected 3" in verdict.reason
    assert partition.states.entry(7) == before
    assert partition.produce(batch(7, 0, 3))[0] is APPEND


def test_a_new_epoch_starts_at_sequence_zero_and_forgets_the_old_batches():
    partition = Partition()
    old = batch(7, 0, 0, 2)
    partition.produce(old)
    partition.produce(batch(7, 0, 2, 2))
    verdict, _ = partition.produce(batch(7, 1, 4))  # a newer epoch not at 0
    assert verdict.outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER and "new epoch 1" in verdict.reason
    bumped = batch(7, 1, 0, 2, tag=b"bumped")
    verdict, first = partition.produce(bumped)
    assert verdict is APPEND
    entry = partition.states.entry(7)
    assert entry.epoch == 1 and [(kept.first_sequence, kept.first_offset) for kept in entry.batches] == [(0, first)]
    assert partition.produce(bumped)[0].first_offset == first  # a retry in the new epoch
    assert partition.produce(batch(7, 1, 2))[0] is APPEND
    assert partition.produce(batch(7, 3, 0))[0] is APPEND  # epochs may skip


def test_an_older_epoch_is_fenced():
    partition = Partition()
    old = batch(7, 4, 0, 2)
    partition.produce(old)
    partition.produce(batch(7, 5, 0))
    for data in (old, batch(7, 4, 2), batch(7, 0, 0), batch(7, 3, 0)):
        verdict, _ = partition.produce(data)  # a retry of the old epoch's batch too
        assert verdict.outcome is Outcome.INVALID_PRODUCER_EPOCH and verdict.error == 47
        assert "epoch 5" in verdict.reason
    assert partition.states.entry(7).epoch == 5


def test_a_producer_without_state_is_accepted_at_any_sequence_then_held_to_it():
    """KIP-360 (Kafka 2.5+): no UNKNOWN_PRODUCER_ID (59)."""
    partition = Partition()
    verdict, _ = partition.produce(batch(9, 3, 12345, 5))
    assert verdict is APPEND
    assert partition.produce(batch(9, 3, 12351))[0].outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.produce(batch(9, 3, 12350))[0] is APPEND


def test_sequences_wrap_from_the_largest_to_zero():
    assert last_sequence(MAX_SEQUENCE - 1, 3) == 0
    assert last_sequence(MAX_SEQUENCE, 1) == MAX_SEQUENCE
    partition = Partition()
    assert partition.produce(batch(7, 0, MAX_SEQUENCE - 5, 4))[0] is APPEND  # .. MAX - 2
    wrapping = batch(7, 0, MAX_SEQUENCE - 1, 3)  # MAX - 1, MAX, 0
    verdict, first = partition.produce(wrapping)
    assert verdict is APPEND
    assert partition.states.entry(7).batches[-1][:2] == (MAX_SEQUENCE - 1, 0)
    duplicate = partition.produce(wrapping)[0]
    assert duplicate.outcome is Outcome.DUPLICATE and duplicate.first_offset == first
    assert partition.produce(batch(7, 0, 2))[0].outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.produce(batch(7, 0, 1, 2))[0] is APPEND
    # A batch ending exactly at the largest sequence: the next starts at 0.
    other = Partition()
    other.produce(batch(8, 0, MAX_SEQUENCE - 1, 2))
    assert other.produce(batch(8, 0, 1))[0].outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert other.produce(batch(8, 0, 0))[0] is APPEND


def test_the_batches_of_one_produce_are_judged_in_order_and_all_or_none_recorded():
    partition = Partition()
    verdict, first = partition.produce(batch(7, 0, 0, 2), batch(7, 0, 2), batch(), batch(8, 0, 0))
    assert verdict is APPEND and first == 1000 + len(batch(7, 0, 0, 2)) - 2
    assert partition.states.entry(7).batches[-1].first_sequence == 2 and partition.states.entry(8) is not None
    before = (partition.states.entry(7), partition.position)
    verdict, _ = partition.produce(batch(7, 0, 3), batch(7, 0, 5))  # the second after a gap
    assert verdict.outcome is Outcome.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (partition.states.entry(7), partition.position) == before  # the first was not recorded either
    twice = batch(7, 0, 3)
    verdict, _ = partition.produce(twice, twice)  # the second is a retry of the first, in the same produce
    assert verdict.outcome is Outcome.DUPLICATE
    assert (partition.states.entry(7), partition.position) == before
    verdict, _ = partition.produce(batch(7, 0, 3), batch(7, 0, 4, 3))
    assert verdict is APPEND and partition.states.entry(7).batches[-1][:2] == (4, 6)


def test_a_layer_is_applied_by_commit_and_dropped_without():
    states = ProducerStates()
    layer = states.begin()
    assert layer.check_produce(infos(batch(7, 0, 0)), 0) is APPEND
    assert layer.check_produce(infos(batch(7, 0, 1)), 100) is APPEND  # judged after the first
    assert layer.check_produce(infos(batch(7, 0, 1)), 200).outcome is Outcome.DUPLICATE
    assert states.entry(7) is None  # the append failed: nothing to undo
    layer.commit()
    assert [kept.first_sequence for kept in states.entry(7).batches] == [0, 1]
    assert states.check(infos(batch(7, 0, 2))[0]) is APPEND


def test_the_least_recently_appended_producers_are_evicted_past_the_bound():
    partition = Partition(ProducerStates(max_producers=3))
    for producer_id in (1, 2, 3):
        partition.produce(batch(producer_id, 0, 0))
    partition.produce(batch(1, 0, 1))  # 1 is now the most recent
    partition.produce(batch(4, 0, 0))
    states = partition.states
    assert len(states) == 3 and states.evicted == 1
    assert states.entry(2) is None and states.entry(1) is not None
    # Evicted: unknown again, so a retry of its batch is appended (KIP-360's rule).
    assert partition.produce(batch(2, 0, 0))[0] is APPEND
    assert states.entry(3) is None
    with pytest.raises(ValueError):
        ProducerStates(max_producers=0)


# --- rebuilding from a real log ---------------------------------------------------


def append(partition_log, *produces) -> list:
    """Append ``produces`` (each one produce's bytes) as the worker does; returns each
    produce's first offset."""
    position = partition_log.log_end
    chunks, firsts = [], []
    for data in produces:
        checked, batches = record_batches.checked(data, Config)
        stamped, first = record_batches.stamped(checked, batches, position, None)
        chunks.append(stamped)
        firsts.append(first)
        position += len(stamped)
    partition_log.append_many(chunks, sum(len(infos(bytes(chunk))) for chunk in chunks))
    return firsts


class Config:
    max_message_size = 1_000_000
    max_inflated_request_bytes = 100_000_000


PROBES = [
    *(batch(7, 2, 2 * index, 2) for index in range(8)),  # retries, old and recent, and the next
    batch(7, 2, 17),  # a gap
    batch(7, 1, 0),  # a fenced epoch
    batch(7, 3, 0), batch(7, 3, 5),  # a new epoch
    batch(8, 0, 0, 3), batch(8, 0, 3), batch(8, 0, 4),
    batch(9, 0, MAX_SEQUENCE - 1, 3), batch(9, 0, 1), batch(9, 0, 2),
    batch(10, 0, 0), batch(10, 0, 1), batch(11, 0, 42), batch(),
]


def test_the_state_rebuilt_from_the_reopened_log_gives_the_same_verdicts(tmp_path):
    config = LogConfig(segment_bytes=600)  # a few batches per segment: the walk crosses segments
    partition_log = Log.open(str(tmp_path), "idem", 0, config, recover=False, record_batches=True)
    live = ProducerStates()
    position = partition_log.log_end

    def produce(*batches_bytes):
        nonlocal position
        batches = infos(b"".join(batches_bytes))
        verdict = live.check_produce(batches, position)
        if verdict is APPEND:
            (first,) = append(partition_log, b"".join(batches_bytes))
            assert first == position + batches[0].end - batches[0].records
            position = partition_log.log_end
        return verdict

    assert produce(batch(7, 1, 0, 4), batch()) is APPEND  # an older epoch, forgotten at the bump
    for index in range(8):
        assert produce(batch(7, 2, 2 * index, 2)) is APPEND
        assert produce(batch(tag=b"plain")) is APPEND
    assert produce(batch(8, 0, 0, 3, codec=CODEC_GZIP), batch(8, 0, 3)) is APPEND
    assert produce(batch(9, 0, MAX_SEQUENCE - 3, 2)) is APPEND
    assert produce(batch(9, 0, MAX_SEQUENCE - 1, 3)) is APPEND
    assert produce(batch(10, 0, 0)) is APPEND
    assert partition_log.segment_count > 3
    expected = [live.check(infos(data)[0]) for data in PROBES]
    assert {verdict.outcome for verdict in expected} == set(Outcome)
    entries = {producer_id: live.entry(producer_id) for producer_id in (7, 8, 9, 10)}
    partition_log.close()

    reopened = Log.open(str(tmp_path), "idem", 0, config, recover=True, record_batches=True)
    try:
        rebuilt = ProducerStates.from_log(reopened)
        assert len(rebuilt) == 4
        assert {producer_id: rebuilt.entry(producer_id) for producer_id in entries} == entries
        assert [rebuilt.check(infos(data)[0]) for data in PROBES] == expected
        # Each stored header's base offset is the first offset the state keeps (q - n).
        headers = list(reopened.batch_headers())
        assert all(position + 12 + header.batch_length - header.records == header.base_offset
                   for position, header in headers)
        assert rebuilt.entry(10).batches[-1].first_offset == headers[-1][1].base_offset
        # Walking the last segment only forgets the producers whose batches lie before it.
        tail = ProducerStates.from_log(reopened, from_offset=reopened.log_end - 1)
        assert set(p for p in (7, 8, 9, 10) if tail.entry(p) is not None) < set(entries)
        assert tail.entry(10) == entries[10]
        assert rebuilt.rebuild_from_log(reopened) == 8 * 1 + 1 + 2 + 2 + 1
    finally:
        reopened.close()


def test_rebuilding_an_empty_log_keeps_nothing(tmp_path):
    partition_log = Log.open(str(tmp_path), "idem", 0, LogConfig(), recover=False, record_batches=True)
    try:
        states = ProducerStates()
        states.appended(infos(batch(7, 0, 0))[0], 0)
        assert states.rebuild_from_log(partition_log) == 0 and len(states) == 0
    finally:
        partition_log.close()


def test_a_damaged_header_stops_the_rebuild(tmp_path):
    partition_log = Log.open(str(tmp_path), "idem", 0, LogConfig(), recover=False, record_batches=True)
    try:
        append(partition_log, batch(7, 0, 0))
        partition_log._segments[-1].append(b"\0" * 70)  # what recovery would have cut: batchLength 0
        with pytest.raises(LogCorruptError, match="batchLength 0"):
            ProducerStates.from_log(partition_log)
    finally:
        partition_log.close()
