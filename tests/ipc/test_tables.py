"""PartitionTable (entries, seqlock, torn entries, respawned and concurrent writers) and SlotTable, in real shared memory."""

import mmap
import os
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.ipc import partition_table as pt
from mpbroker.ipc.partition_table import (
    ENTRY_BYTES,
    MAX_TOPIC_BYTES,
    PartitionState,
    PartitionTable,
    TableFullError,
    TornEntryError,
)
from mpbroker.ipc.slot_table import Slot, SlotState, SlotTable
from tests.ipc.forked import Child

SEQ = struct.Struct("<Q")


def entry_offset(index: int) -> int:
    """Where an entry (and its leading u64 seq) lives: after the table header, ENTRY_BYTES each."""
    return pt._HEADER_BYTES + index * ENTRY_BYTES


def seq_of(table: PartitionTable, index: int) -> int:
    return SEQ.unpack_from(table._mm, entry_offset(index))[0]


def state_from(n: int, partition: int = 0) -> PartitionState:
    """Every field derived from one counter, so a torn mix is detectable."""
    return PartitionState(
        log_start=n,
        flushed_end=2 * n,
        log_end=3 * n,
        segments_version=n + 7,
        messages_in=5 * n,
        bytes_in=6 * n,
        last_flush_ms=7 * n,
        recovery_point=8 * n,
        segment_count=n % 2**32,
        partition=partition,
    )


def consistent(state: PartitionState, partition: int = 0) -> bool:
    return state == state_from(state.log_start, partition)


# --- PartitionTable: entries ------------------------------------------------------


def test_find_or_add_returns_stable_indices_and_names_lists_them():
    table = PartitionTable(8)
    assert len(table) == 0
    assert table.names() == []
    assert table.find_or_add("a", 0) == 0
    assert table.find_or_add("a", 1) == 1
    assert table.find_or_add("b", 0) == 2
    assert table.find_or_add("a", 1) == 1
    assert table.find_or_add("a", 0) == 0
    assert table.find_or_add("b", 0) == 2
    assert len(table) == 3
    assert table.names() == [(0, "a", 0), (1, "a", 1), (2, "b", 0)]
    assert table.names(1) == [(1, "a", 1), (2, "b", 0)]
    assert table.names(3) == []
    assert table.name(2) == ("b", 0)


def test_new_entry_reads_as_an_empty_state_of_its_partition():
    table = PartitionTable(4)
    index = table.find_or_add("topic", 42)
    assert table.read(index) == PartitionState(0, 0, 0, 0, 0, 0, 0, -1, 0, 42)
    assert seq_of(table, index) == 0


def test_table_full_error_at_capacity():
    table = PartitionTable(3)
    for partition in range(3):
        assert table.find_or_add("t", partition) == partition
    with pytest.raises(TableFullError):
        table.find_or_add("t", 3)
    with pytest.raises(TableFullError):
        table.find_or_add("other", 0)
    assert len(table) == 3
    assert table.find_or_add("t", 1) == 1  # existing entries are still found when full
    assert table.names() == [(0, "t", 0), (1, "t", 1), (2, "t", 2)]


def test_topic_name_length_limit():
    table = PartitionTable(4)
    longest = "x" * MAX_TOPIC_BYTES
    index = table.find_or_add(longest, 7)
    assert table.name(index) == (longest, 7)
    with pytest.raises(ValueError):
        table.find_or_add("y" * (MAX_TOPIC_BYTES + 1), 0)
    assert len(table) == 1


def test_entries_fit_their_slots():
    # seq + fields + the longest name must fit in one entry
    assert pt._NAME_AT + pt._NAME_LENGTH.size + MAX_TOPIC_BYTES <= ENTRY_BYTES
    table = PartitionTable(3)
    for i in range(3):
        table.find_or_add(chr(ord("a") + i) * MAX_TOPIC_BYTES, i)
        table.write(i, state_from(1 + i, i)._replace(log_start=-1 - i, segments_version=2**64 - 1,
                                                      segment_count=2**32 - 1))
    for i in range(3):
        assert table.name(i) == (chr(ord("a") + i) * MAX_TOPIC_BYTES, i)
        assert table.read(i).log_start == -1 - i
        assert table.read(i).log_end == 3 * (1 + i)
        assert table.read(i).segments_version == 2**64 - 1


states = st.builds(
    PartitionState,
    log_start=st.integers(-(2**63), 2**63 - 1),
    flushed_end=st.integers(-(2**63), 2**63 - 1),
    log_end=st.integers(-(2**63), 2**63 - 1),
    segments_version=st.integers(0, 2**64 - 1),
    messages_in=st.integers(0, 2**64 - 1),
    bytes_in=st.integers(0, 2**64 - 1),
    last_flush_ms=st.integers(-(2**63), 2**63 - 1),
    recovery_point=st.integers(-(2**63), 2**63 - 1),
    segment_count=st.integers(0, 2**32 - 1),
    partition=st.just(5),
    role=st.sampled_from([0, 1, 2, 3, 4]),
    leader=st.integers(-1, 2**31),
    leader_epoch=st.integers(-1, 2**40),
    epoch_start=st.integers(0, 2**63 - 1),
    high_watermark=st.integers(0, 2**63 - 1),
    replica_count=st.integers(0, 2**31),
    isr_slots=st.lists(st.integers(0, 2**31 - 1), max_size=pt.MAX_ISR).map(pt.isr_slots),
    generation=st.integers(0, 2**63 - 1),
)


@given(first=states, second=states)
def test_write_read_round_trip(first, second):
    table = PartitionTable(2)
    a = table.find_or_add("a", 5)
    b = table.find_or_add("b", 5)
    table.write(a, first)
    table.write(b, second)
    assert table.read(a) == first
    assert table.read(b) == second
    assert seq_of(table, a) == 2 and seq_of(table, b) == 2  # one odd/even cycle each
    table.write(a, second)
    assert table.read(a) == second
    assert table.read(b) == second
    assert seq_of(table, a) == 4
    assert table.names() == [(0, "a", 5), (1, "b", 5)]


def test_respawned_writer_finds_its_entries_by_name():
    table = PartitionTable(8)  # made before the fork, like the supervisor does

    def first_life():
        indices = [table.find_or_add("orders", 0), table.find_or_add("orders", 1), table.find_or_add("clicks", 3)]
        for index, n in zip(indices, (10, 20, 30)):
            table.write(index, state_from(n, table.name(index)[1]))
        return indices

    assert Child(first_life).result(timeout=10) == [0, 1, 2]
    assert len(table) == 3

    def second_life():
        found = [table.find_or_add("clicks", 3), table.find_or_add("orders", 0), table.find_or_add("orders", 1)]
        previous = [table.read(index) for index in found]
        added = table.find_or_add("orders", 2)
        table.write(added, state_from(40, 2))
        return found, previous, added

    found, previous, added = Child(second_life).result(timeout=10)
    assert found == [2, 0, 1]
    assert previous == [state_from(30, 3), state_from(10, 0), state_from(20, 1)]
    assert added == 3
    assert table.names() == [(0, "orders", 0), (1, "orders", 1), (2, "clicks", 3), (3, "orders", 2)]
    assert table.read(3) == state_from(40, 2)


# --- PartitionTable: torn entries -------------------------------------------------


def test_entry_left_mid_update_raises_torn_and_next_write_repairs_it():
    table = PartitionTable(4)
    a = table.find_or_add("a", 0)
    b = table.find_or_add("b", 1)
    table.write(a, state_from(1))
    table.write(b, state_from(2, 1))
    seq = seq_of(table, a)
    assert seq % 2 == 0
    SEQ.pack_into(table._mm, entry_offset(a), seq + 1)  # the writer died after making seq odd
    with pytest.raises(TornEntryError):
        table.read(a)
    assert table.read(b) == state_from(2, 1)  # other entries are unaffected
    assert table.name(a) == ("a", 0)
    table.write(a, state_from(3))
    assert table.read(a) == state_from(3)
    repaired = seq_of(table, a)
    assert repaired % 2 == 0 and repaired > seq + 1  # readers see a new even seq


def test_writer_process_dying_mid_update_then_a_respawned_writer_repairs():
    table = PartitionTable(4)
    index = table.find_or_add("t", 0)
    table.write(index, state_from(5))

    def dies_mid_update():
        at = entry_offset(table.find_or_add("t", 0))
        (seq,) = SEQ.unpack_from(table._mm, at)
        SEQ.pack_into(table._mm, at, seq | 1)
        struct.pack_into("<q", table._mm, at + 8, 999)  # part of a new state
        return seq  # and the process exits without finishing the update

    seq = Child(dies_mid_update).result(timeout=10)
    assert seq_of(table, index) == seq + 1
    with pytest.raises(TornEntryError):
        table.read(index)

    def respawned():
        i = table.find_or_add("t", 0)
        table.write(i, state_from(6))
        return i

    assert Child(respawned).result(timeout=10) == index
    assert table.read(index) == state_from(6)


def test_writer_killed_mid_update_then_a_respawned_worker_takes_its_entries_over():
    """A worker SIGKILLed between the two seq stores leaves its entry odd for good. Its
    respawn (Publisher.add, as a worker opening its logs does) must not wait for an even
    seq nobody will write: it takes the entry over at once, keeps the counters, and
    readers see a consistent state again."""
    from mpbroker.workers.publisher import Publisher

    table = PartitionTable(4)
    index = table.find_or_add("t", 0)
    table.write(index, state_from(5))

    def killed_mid_update():
        import signal as signals

        found = table.find_or_add("t", 0)

        class DieWhileStoring:  # the real write path, killed where a SIGKILL can land
            def pack_into(self, *args):
                buffer, at, first = args[:3]
                struct.pack_into("<q", buffer, at, first)  # the first field stored, then death
                os.kill(os.getpid(), signals.SIGKILL)

        pt._FIELDS = DieWhileStoring()
        table.write(found, state_from(6))

    child = Child(killed_mid_update)
    with pytest.raises(AssertionError, match="died without a result"):
        child.result(timeout=10)
    assert os.WTERMSIG(child.status) == 9 and seq_of(table, index) % 2 == 1

    class RecoveredLog:  # what Publisher reads of a Log
        topic, partition = "t", 0
        log_start, flushed_end, log_end, segments_version, segment_count, recovery_point = 0, 10, 12, 0, 1, 10

    def respawned():
        started = time.monotonic()
        publisher = Publisher(table)
        publisher.add(RecoveredLog())
        return time.monotonic() - started

    took = Child(respawned).result(timeout=10)
    assert took < pt.DEFAULT_PATIENCE_S / 5, f"the respawned worker waited {took:.2f}s for a dead writer"
    state = table.read(index)
    assert (state.flushed_end, state.log_end, state.recovery_point) == (10, 12, 10)
    assert (state.messages_in, state.bytes_in) == (25, 30)  # its predecessor's counters go on
    assert state.segments_version > state_from(5).segments_version  # readers re-list the segments


def test_take_over_reads_a_torn_entry_without_waiting():
    table = PartitionTable(2)
    index = table.find_or_add("t", 3)
    table.write(index, state_from(9, 3))
    SEQ.pack_into(table._mm, entry_offset(index), seq_of(table, index) + 1)
    started = time.monotonic()
    assert table.take_over(index) == state_from(9, 3)
    assert time.monotonic() - started < 0.05


# --- PartitionTable: concurrent writer --------------------------------------------


def _start_tight_writer(table: PartitionTable, index: int, stop: mmap.mmap, cpu=None) -> Child:
    """A forked writer storing state_from(1), state_from(2), ... until ``stop[0]`` is set."""
    table.write(index, state_from(0))

    def writer():
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        n = 0
        while stop[0] == 0:
            for _ in range(256):
                n += 1
                table.write(index, state_from(n))
        return n

    return Child(writer)


def test_reader_follows_a_concurrent_writer_to_its_final_state():
    table = PartitionTable(2)
    other = table.find_or_add("cold", 1)
    table.write(other, state_from(77, 1))
    index = table.find_or_add("hot", 0)
    stop = mmap.mmap(-1, mmap.PAGESIZE)
    child = _start_tight_writer(table, index, stop)
    try:
        seen = set()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            seen.add(table.read(index).log_start)  # a live writer is never reported as torn
        stop[0] = 1
        written = child.result(timeout=10)
    finally:
        child.kill()
    assert len(seen) > 100  # the reader saw the other process's updates as they happened
    assert written > 1000
    assert table.read(index) == state_from(written)  # and the last one exactly
    assert table.read(other) == state_from(77, 1)  # the neighbour entry was never touched
    assert seq_of(table, index) == 2 * (written + 1)


def test_concurrent_reads_never_see_a_torn_mix_nor_seq_going_back():
    table = PartitionTable(2)
    index = table.find_or_add("hot", 0)
    stop = mmap.mmap(-1, mmap.PAGESIZE)
    child = _start_tight_writer(table, index, stop)
    at = entry_offset(index)
    try:
        reads = 0
        last_seq = seq_of(table, index)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            state = table.read(index)  # a live writer is never reported as torn
            reads += 1
            assert consistent(state), f"torn read accepted by the seqlock: {state}"
            # the seqlock's invariant: seq only grows (odd while a write is under way)
            (seq,) = SEQ.unpack_from(table._mm, at)
            assert seq >= last_seq, f"seq went back from {last_seq} to {seq} while the writer ran"
            last_seq = seq
        assert reads > 1000
    finally:
        stop[0] = 1
        child.kill()


def test_live_but_preempted_writer_is_not_reported_as_torn():
    table = PartitionTable(2)
    index = table.find_or_add("hot", 0)
    stop = mmap.mmap(-1, mmap.PAGESIZE)
    parent_cpus = os.sched_getaffinity(0)
    cpu = min(parent_cpus)
    child = _start_tight_writer(table, index, stop, cpu=cpu)
    os.sched_setaffinity(0, {cpu})  # writer and reader share one CPU: the writer gets preempted
    try:
        deadline = time.monotonic() + 2.0
        reads = 0
        while time.monotonic() < deadline:
            table.read(index)  # must never raise: the writer is alive the whole time
            reads += 1
        assert reads > 1000
    finally:
        os.sched_setaffinity(0, parent_cpus)
        stop[0] = 1
        child.kill()


# --- SlotTable ------------------------------------------------------------------


def test_slot_table_starts_empty():
    slots = SlotTable(4)
    for slot in range(4):
        assert slots.read(slot) == Slot(0, SlotState.EMPTY, 0, 0, 0, 0)


def test_slot_write_read_round_trip_and_slots_are_independent():
    slots = SlotTable(70)  # more than one page of slots
    slots.write(0, pid=1234, state=SlotState.STARTING, generation=3, restarts=2, started_ms=1_700_000_000_123)
    slots.write(69, pid=2**31, state=SlotState.UP, generation=2**63 - 1, restarts=0, started_ms=-5)
    assert slots.read(0) == Slot(1234, SlotState.STARTING, 3, 2, 1_700_000_000_123, 0)
    assert slots.read(69) == Slot(2**31, SlotState.UP, 2**63 - 1, 0, -5, 0)
    assert slots.read(1) == Slot(0, 0, 0, 0, 0, 0)
    assert slots.read(68) == Slot(0, 0, 0, 0, 0, 0)


def test_set_state_changes_only_the_state():
    slots = SlotTable(3)
    slots.write(1, pid=99, state=SlotState.STARTING, generation=4, restarts=1, started_ms=1000)
    slots.beat(1, 5555)
    slots.set_state(1, SlotState.UP)
    assert slots.read(1) == Slot(99, SlotState.UP, 4, 1, 1000, 5555)
    slots.set_state(1, SlotState.DOWN)
    assert slots.read(1) == Slot(99, SlotState.DOWN, 4, 1, 1000, 5555)
    assert slots.read(0) == Slot(0, 0, 0, 0, 0, 0)
    assert slots.read(2) == Slot(0, 0, 0, 0, 0, 0)


def test_beat_changes_only_the_heartbeat():
    slots = SlotTable(3)
    for slot in range(3):
        slots.write(slot, pid=100 + slot, state=SlotState.UP, generation=slot, restarts=7, started_ms=2000 + slot)
    before = [slots.read(slot) for slot in range(3)]
    slots.beat(1, 1_700_000_000_999)
    assert slots.read(1) == before[1]._replace(heartbeat_ms=1_700_000_000_999)
    assert slots.read(0) == before[0]
    assert slots.read(2) == before[2]
    # a later write by the supervisor keeps the heartbeat
    slots.write(1, pid=200, state=SlotState.STARTING, generation=9, restarts=8, started_ms=3000)
    assert slots.read(1) == Slot(200, SlotState.STARTING, 9, 8, 3000, 1_700_000_000_999)


def test_heartbeat_read_while_the_slot_process_beats_is_never_torn():
    slots = SlotTable(2)
    base = 1_700_000_000_000
    slots.write(1, pid=1, state=SlotState.UP, generation=1, restarts=0, started_ms=base)
    slots.beat(1, base)
    stop = mmap.mmap(-1, mmap.PAGESIZE)

    def beating():
        n = 0
        while stop[0] == 0:
            for _ in range(256):
                n += 1
                slots.beat(1, base + n)
        return n

    child = Child(beating)
    try:
        last = base
        reads = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            slot = slots.read(1)
            reads += 1
            assert slot.heartbeat_ms >= last, f"heartbeat went back from {last} to {slot.heartbeat_ms}"
            assert slot[:5] == (1, SlotState.UP, 1, 0, base)
            last = slot.heartbeat_ms
        assert reads > 1000
    finally:
        stop[0] = 1
        child.kill()


def test_heartbeat_from_a_forked_slot_process_is_seen_by_the_supervisor():
    slots = SlotTable(2)
    slots.write(1, pid=0, state=SlotState.STARTING, generation=1, restarts=0, started_ms=10)

    def worker():
        slots.beat(1, 424242)
        return os.getpid()

    child = Child(worker)
    pid = child.result(timeout=10)
    assert pid == child.pid
    assert slots.read(1) == Slot(0, SlotState.STARTING, 1, 0, 10, 424242)


def test_a_deleted_entry_keeps_its_index_and_is_left_out_of_the_published_partitions():
    table = pt.PartitionTable(4)
    table.find_or_add("kept", 0)
    gone = table.find_or_add("gone", 0)
    table.write(gone, PartitionState(0, 0, 0, 7, 10, 100, 0, -1, 0, 0, role=pt.Role.DELETED, generation=1))
    assert [row[0] for row in pt.published_partitions([table])] == ["kept"]
    assert table.find_or_add("gone", 0) == gone  # made anew: the same entry, a new generation
    assert table.read(gone).generation == 1
