"""A replica's log cut back (Log.truncate_to, Log.truncate_fully_and_start_at) and its
leader epochs kept with it (Log.assign_epoch, retention): the bytes past the cut are
gone from the files, durably, before the call returns; the ends, the segment list and
the epoch file follow; appends go on at the cut; a reopen (recovering or not) shows
the new bytes and no trace of the old ones."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.codec.message_set import validate_message_set
from mpbroker.segments import LogConfig, truncation
from mpbroker.segments.leader_epochs import FILE_NAME, EpochEntry, LeaderEpochs
from mpbroker.segments.log import Log
from mpbroker.segments.verify import verify_partition

from .conftest import FakeClock, message_set

HOUR = 3600 * 1000
CHUNK = message_set(4)
SIZE = len(CHUNK)


def everything(log) -> bytes:
    """Every flushed byte of the log, read through Log.read_bytes."""
    data, offset = [], log.log_start
    while offset < log.flushed_end:
        chunk = log.read_bytes(offset, 1 << 20)
        data.append(chunk)
        offset += len(chunk)
    return b"".join(data)


def on_disk(log) -> dict:
    """Segment file name -> its bytes, as the directory holds them."""
    found = {}
    for name in sorted(os.listdir(log.directory)):
        if name.endswith(".kafka"):
            with open(os.path.join(log.directory, name), "rb") as file:
                found[name] = file.read()
    return found


def name(base: int) -> str:
    return f"{base:020d}.kafka"


def filled(open_log, sets, tag=b"old", **config):
    """A flushed log of ``sets`` sets of SIZE bytes, one per segment unless configured."""
    config.setdefault("segment_bytes", SIZE)
    log = open_log(**config)
    for index in range(sets):
        log.append(message_set(4, tag=tag + b"%d" % index), 4)
    log.flush()
    return log


def test_truncate_inside_the_last_segment(open_log):
    log = filled(open_log, 4, segment_bytes=SIZE * 4)
    before = everything(log)
    version = log.segments_version
    assert log.truncate_to(SIZE * 2) == SIZE * 2
    assert (log.log_end, log.flushed_end, log.recovery_point) == (SIZE * 2,) * 3
    assert log.segment_bases == [0] and log.segments_version == version
    assert on_disk(log) == {name(0): before[:SIZE * 2]}
    new = message_set(3, tag=b"new")
    assert log.append(new, 3) == SIZE * 2
    log.flush()
    assert everything(log) == before[:SIZE * 2] + new


def test_truncate_at_a_segment_base_empties_that_segment(open_log):
    log = filled(open_log, 4)
    before = everything(log)
    version = log.segments_version
    assert log.truncate_to(SIZE * 2) == SIZE * 2
    assert log.segment_bases == [0, SIZE, SIZE * 2]  # the one at the cut stays, empty: the active one
    assert log.segments_version > version
    assert on_disk(log) == {name(0): before[:SIZE], name(SIZE): before[SIZE:SIZE * 2], name(SIZE * 2): b""}
    new = message_set(4, tag=b"new")
    assert log.append(new, 4) == SIZE * 2
    assert log.segment_bases == [0, SIZE, SIZE * 2]
    log.flush()
    assert everything(log) == before[:SIZE * 2] + new


def test_truncate_across_segments_deletes_the_later_ones(open_log):
    log = filled(open_log, 6, segment_bytes=SIZE * 2)  # segments of two sets: [0, 2, 4] sets
    before = everything(log)
    cut = SIZE * 3  # between the two sets of the second segment
    assert log.truncate_to(cut) == cut
    assert log.segment_bases == [0, SIZE * 2]
    assert on_disk(log) == {name(0): before[:SIZE * 2], name(SIZE * 2): before[SIZE * 2:cut]}
    assert everything(log) == before[:cut]
    new = [message_set(4, tag=b"new%d" % i) for i in range(3)]
    assert log.append_many(new, 12) == cut
    assert log.segment_bases == [0, SIZE * 2, SIZE * 4]  # rolls as before
    log.flush()
    assert everything(log) == before[:cut] + b"".join(new)


def test_truncate_inside_a_message_cuts_exactly_there(open_log):
    """The API cuts bytes; the caller cuts where its leader's log diverges (set boundaries)."""
    log = filled(open_log, 2, segment_bytes=SIZE * 4)
    before = everything(log)
    assert log.truncate_to(SIZE + 7) == SIZE + 7
    assert on_disk(log) == {name(0): before[:SIZE + 7]}


def test_truncate_to_the_end_or_past_it_changes_no_byte(open_log):
    log = filled(open_log, 3)
    before, files, version = everything(log), on_disk(log), log.segments_version
    assert log.truncate_to(log.log_end + 100) == log.log_end
    assert log.truncate_to(log.log_end) == log.log_end
    assert (everything(log), on_disk(log), log.segments_version) == (before, files, version)
    assert log.flushed_end == log.recovery_point == log.log_end


def test_truncate_below_the_log_start_is_refused(open_log):
    log = filled(open_log, 4, retention_bytes=SIZE * 2)
    assert log.apply_retention() == [0, SIZE]
    with pytest.raises(ValueError, match="below its log start"):
        log.truncate_to(SIZE * 2 - 1)
    assert log.log_end == SIZE * 4
    assert log.truncate_to(SIZE * 2) == SIZE * 2  # at the log start: the log is emptied
    assert log.segment_bases == [SIZE * 2] and log.size == 0
    assert on_disk(log) == {name(SIZE * 2): b""}
    assert log.append(CHUNK, 4) == SIZE * 2


def test_flushed_end_and_recovery_point_come_down(open_log):
    log = filled(open_log, 2, segment_bytes=SIZE * 10)
    log.append_many([CHUNK, CHUNK], 8)  # unflushed
    assert (log.flushed_end, log.recovery_point, log.unflushed_messages) == (SIZE * 2, SIZE * 2, 8)
    assert log.truncate_to(SIZE * 3) == SIZE * 3  # inside the unflushed bytes: the flushed ones stay
    assert (log.flushed_end, log.recovery_point) == (SIZE * 2, SIZE * 2)
    assert log.needs_flush
    log.flush()
    assert log.flushed_end == log.recovery_point == SIZE * 3
    log.append(CHUNK, 4)
    assert log.truncate_to(SIZE) == SIZE  # below both
    assert (log.log_end, log.flushed_end, log.recovery_point, log.unflushed_messages) == (SIZE, SIZE, SIZE, 0)
    assert not log.needs_flush


def test_a_truncation_is_synced_before_it_returns(open_log, monkeypatch):
    """The deleted names are synced (directory) before the cut segment is fsync'ed, and
    both before the call returns: a power cut cannot bring the cut bytes back."""
    log = filled(open_log, 5, segment_bytes=SIZE * 2)
    log.assign_epoch(1, SIZE * 4)
    events = []
    real_fsync, real_sync_directory = os.fsync, truncation.sync_directory
    kept = log._segments[1]

    def fsync(fd):
        if fd == kept.fd:
            events.append(("fsync", "segment"))
        real_fsync(fd)

    def sync_directory(path):
        events.append(("directory", path))
        real_sync_directory(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(truncation, "sync_directory", sync_directory)
    monkeypatch.setattr(LeaderEpochs, "write", lambda self: events.append(("epochs", list(self.entries))))
    log.truncate_to(SIZE * 3)
    assert events == [("directory", log.directory), ("fsync", "segment"), ("epochs", [])]
    assert not log._dirty_directories and not kept.dirty


def test_no_truncation_while_a_flush_is_in_flight(open_log):
    log = filled(open_log, 3)
    log.append(CHUNK, 4)
    pending = log.begin_flush()
    assert log.flush_in_flight
    with pytest.raises(RuntimeError, match="flush is in flight"):
        log.truncate_to(SIZE)
    with pytest.raises(RuntimeError, match="flush is in flight"):
        log.truncate_fully_and_start_at(10_000)
    log.finish_flush(pending)
    assert not log.flush_in_flight and log.log_end == SIZE * 4
    assert log.truncate_to(SIZE) == SIZE


def test_a_failed_log_refuses_truncation(open_log):
    log = filled(open_log, 2)
    log.failure = "its files were removed"
    with pytest.raises(StorageError, match="files were removed"):
        log.truncate_to(0)


def test_a_failed_unlink_leaves_a_prefix_matching_the_log(open_log, monkeypatch):
    log = filled(open_log, 5)
    before = everything(log)
    version = log.segments_version
    real_unlink = os.unlink
    calls = []

    def unlink(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(StorageError, match=r"truncating .* to %d failed: Input/output error; it now ends at %d"
                                           % (SIZE, SIZE * 4)):
        log.truncate_to(SIZE)
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert log.segment_bases == [0, SIZE, SIZE * 2, SIZE * 3]  # the last one went, from the end
    assert sorted(on_disk(log)) == [name(base) for base in log.segment_bases]
    assert log.log_end == log.flushed_end == SIZE * 4 and log.segments_version > version
    assert log.needs_flush  # the directory, for the name already removed
    assert everything(log) == before[:SIZE * 4]
    assert log.truncate_to(SIZE) == SIZE  # tried again
    assert on_disk(log) == {name(0): before[:SIZE], name(SIZE): b""}


def test_a_failed_fsync_of_the_cut_segment_reports_what_the_file_holds(open_log, monkeypatch):
    log = filled(open_log, 3, segment_bytes=SIZE * 4)
    log.assign_epoch(1, 0)
    log.assign_epoch(2, SIZE * 2)

    def fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(StorageError, match="Input/output error"):
        log.truncate_to(SIZE)
    monkeypatch.undo()
    assert log.log_end == log.flushed_end == SIZE == os.path.getsize(log._segments[0].path)
    assert log._segments[0].dirty and log.needs_flush  # the next flush syncs it
    assert log.leader_epochs.entries == [(1, 0)]  # fitted to what is left (the file could not be written)
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (2, SIZE * 2)]
    log.flush()
    assert not log._segments[0].dirty
    assert log.truncate_to(SIZE) == SIZE  # nothing to cut; the epochs are written now
    assert LeaderEpochs.load(log.directory).entries == [(1, 0)]


# --- leader epochs --------------------------------------------------------------


def test_epochs_are_cut_with_the_log_and_the_file_rewritten(open_log):
    log = filled(open_log, 6)
    assert log.assign_epoch(1, 0)
    assert log.assign_epoch(3, SIZE * 2)
    assert log.assign_epoch(5, SIZE * 4)
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (3, SIZE * 2), (5, SIZE * 4)]
    log.truncate_to(SIZE * 4)  # epoch 5 began at the cut: it goes
    assert log.leader_epochs.entries == [(1, 0), (3, SIZE * 2)]
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (3, SIZE * 2)]
    log.truncate_to(SIZE * 3)  # inside epoch 3: it stays
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (3, SIZE * 2)]
    assert log.assign_epoch(6)  # at the log end, where the next append goes
    log.append(CHUNK, 4)
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (3, SIZE * 2), (6, SIZE * 3)]


def test_truncating_to_the_end_forgets_an_epoch_that_holds_nothing(open_log):
    log = filled(open_log, 2)
    log.assign_epoch(1, 0)
    log.assign_epoch(2)  # became leader at the log end, appended nothing
    log.truncate_to(log.log_end + 1)  # past the end: nothing at all
    assert log.leader_epochs.entries == [(1, 0), (2, SIZE * 2)]
    log.truncate_to(log.log_end)  # the epochs that began at or after the cut go
    assert LeaderEpochs.load(log.directory).entries == [(1, 0)]


def test_assign_epoch_rules_and_persistence(open_log, monkeypatch):
    log = filled(open_log, 3)
    assert not os.path.exists(os.path.join(log.directory, FILE_NAME))  # not replicated: no file
    assert log.assign_epoch(2)
    assert log.leader_epochs.entries == [EpochEntry(2, SIZE * 3)]
    writes = []
    monkeypatch.setattr(LeaderEpochs, "write", lambda self: writes.append(1))
    assert not log.assign_epoch(2, SIZE * 3)  # not newer: no change, no write
    assert not log.assign_epoch(1)
    with pytest.raises(ValueError, match="outside the log"):
        log.assign_epoch(3, SIZE * 3 + 1)
    with pytest.raises(ValueError, match="starts before"):
        log.assign_epoch(3, SIZE)
    with pytest.raises(ValueError, match=">= 0"):
        log.assign_epoch(-1)
    assert writes == [] and log.leader_epochs.entries == [EpochEntry(2, SIZE * 3)]
    monkeypatch.undo()
    log.close()
    reopened = open_log(segment_bytes=SIZE)
    assert reopened.leader_epochs.entries == [EpochEntry(2, SIZE * 3)]


def test_a_failed_epoch_write_is_retried_at_the_next_change(open_log, monkeypatch):
    log = filled(open_log, 2)
    real_write = LeaderEpochs.write

    def failing(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LeaderEpochs, "write", failing)
    with pytest.raises(StorageError, match="cannot write the leader epochs .*No space left"):
        log.assign_epoch(4)
    monkeypatch.setattr(LeaderEpochs, "write", real_write)
    assert not log.assign_epoch(4)  # already recorded, but the file is written now
    assert LeaderEpochs.load(log.directory).entries == [(4, SIZE * 2)]


def test_retention_moves_the_first_epoch_up(open_log, clock):
    log = filled(open_log, 5, retention_ms=HOUR)
    log.assign_epoch(1, 0)
    log.assign_epoch(2, SIZE)
    log.assign_epoch(3, SIZE * 3)
    for segment in log._segments[:3]:
        os.utime(segment.path, ns=((clock() - 2 * HOUR) * 1_000_000,) * 2)
    assert log.apply_retention() == [0, SIZE, SIZE * 2]
    assert log.leader_epochs.entries == [(3, SIZE * 3)]  # epochs 1 and 2 lay wholly below the start
    assert LeaderEpochs.load(log.directory).entries == log.leader_epochs.entries
    for segment in log._segments[:1]:
        os.utime(segment.path, ns=((clock() - 2 * HOUR) * 1_000_000,) * 2)
    assert log.apply_retention() == [SIZE * 3]
    assert LeaderEpochs.load(log.directory).entries == [(3, SIZE * 4)]


def test_retention_without_epochs_writes_no_file(open_log, clock):
    log = filled(open_log, 3, retention_bytes=1)
    assert log.apply_retention() == [0, SIZE]
    assert not os.path.exists(os.path.join(log.directory, FILE_NAME))


def test_open_fits_epochs_a_crash_left_past_the_log_end(tmp_path, open_log):
    log = filled(open_log, 3)
    log.close()
    epochs = LeaderEpochs(log.directory, [EpochEntry(1, 0), EpochEntry(2, SIZE * 3), EpochEntry(4, SIZE * 5)])
    epochs.write()  # as if a truncation to SIZE * 3 died before rewriting the epochs
    reopened = open_log(recover=True, segment_bytes=SIZE)
    assert reopened.leader_epochs.entries == [(1, 0), (2, SIZE * 3)]  # one at the log end stays
    assert LeaderEpochs.load(log.directory).entries == [(1, 0), (2, SIZE * 3)]


def test_a_damaged_epoch_file_refuses_the_open_before_recovery_changes_anything(tmp_path, open_log):
    log = filled(open_log, 2)
    log.close()
    files = on_disk(log)
    with open(os.path.join(log.directory, name(SIZE)), "ab") as file:
        file.write(b"\x00torn")
    (tmp_path / "clicks-0" / FILE_NAME).write_text("0\n2\n1 0\n")
    with pytest.raises(LogCorruptError, match=FILE_NAME):
        open_log(recover=True, recovery_point=0)
    assert on_disk(log)[name(SIZE)] == files[name(SIZE)] + b"\x00torn"


def test_recovery_and_verify_take_the_epoch_file_in_their_stride(open_log, caplog):
    log = filled(open_log, 3)
    log.assign_epoch(1, 0)
    log.close()
    caplog.set_level("WARNING")
    reopened = open_log(recover=True, recovery_point=0, segment_bytes=SIZE)
    assert reopened.log_end == SIZE * 3 and reopened.leader_epochs.entries == [(1, 0)]
    assert not caplog.records
    report = verify_partition(log.directory)
    assert report.segments == 3 and report.problems == [] and report.end == SIZE * 3


# --- truncate fully ---------------------------------------------------------------


@pytest.mark.parametrize("recover", [False, True])
def test_truncate_fully_then_append_then_reopen(open_log, recover):
    log = filled(open_log, 4)
    log.assign_epoch(2, 0)
    version = log.segments_version
    start = 1_000_000
    log.truncate_fully_and_start_at(start)
    assert (log.log_start, log.log_end, log.flushed_end, log.recovery_point) == (start,) * 4
    assert log.segment_bases == [start] and log.segments_version > version
    assert on_disk(log) == {name(start): b""}
    assert log.leader_epochs.entries == [] and LeaderEpochs.load(log.directory).entries == []
    assert log.unflushed_messages == 0 and not log.needs_flush
    log.assign_epoch(7)
    new = [message_set(4, tag=b"new%d" % i) for i in range(3)]
    assert log.append_many(new, 12) == start
    assert log.segment_bases == [start, start + SIZE, start + SIZE * 2]
    log.close()
    reopened = open_log(recover=recover, recovery_point=start if recover else None, segment_bytes=SIZE)
    assert reopened.log_start == start and reopened.log_end == start + SIZE * 3
    assert everything(reopened) == b"".join(new)
    assert reopened.leader_epochs.entries == [(7, start)]


def test_truncate_fully_at_its_own_start_or_below(open_log):
    log = filled(open_log, 3, retention_bytes=SIZE)
    log.apply_retention()
    assert log.log_start == SIZE * 2
    log.truncate_fully_and_start_at(SIZE * 2)  # no rename: the first segment is emptied
    assert log.segment_bases == [SIZE * 2] and on_disk(log) == {name(SIZE * 2): b""}
    log.append(CHUNK, 4)
    log.truncate_fully_and_start_at(5)  # below: any offset will do
    assert on_disk(log) == {name(5): b""} and (log.log_start, log.log_end) == (5, 5)
    assert log.read(5, 100).length == 0
    with pytest.raises(ValueError):
        log.truncate_fully_and_start_at(-1)


def test_truncate_fully_refuses_a_name_in_the_way(open_log, tmp_path):
    log = filled(open_log, 2)
    (tmp_path / "clicks-0" / name(500)).write_bytes(b"")
    with pytest.raises(StorageError, match="afresh at 500 failed.*holds \\[0, 0\\]"):
        log.truncate_fully_and_start_at(500)
    assert log.segment_bases == [0] and log.log_end == 0  # emptied, consistent with the disk
    os.unlink(tmp_path / "clicks-0" / name(500))
    log.truncate_fully_and_start_at(500)
    assert log.segment_bases == [500]


# --- reopening shows no trace of the cut bytes ------------------------------------------


@pytest.mark.parametrize("recover", [False, True])
def test_a_reopen_after_truncation_shows_no_trace_of_the_cut_bytes(open_log, recover):
    log = filled(open_log, 3, tag=b"keep", segment_bytes=SIZE * 2)
    kept = everything(log)
    for index in range(4):
        log.append(message_set(4, tag=b"DIVERGENT%d" % index), 4)
    log.flush()
    log.truncate_to(SIZE * 3)
    new = message_set(2, size=30, tag=b"new")
    log.append(new, 2)
    log.close()
    reopened = open_log(recover=recover, recovery_point=SIZE * 3 if recover else None, segment_bytes=SIZE * 2)
    assert reopened.log_end == SIZE * 3 + len(new)
    assert everything(reopened) == kept + new
    assert not any(b"DIVERGENT" in data for data in on_disk(reopened).values())
    assert validate_message_set(everything(reopened)).complete


# --- a property: any mix of appends, flushes, epochs, truncations and reopens ------------

_OPERATIONS = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(1, 3), min_size=1, max_size=4)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("epoch")),
    st.tuples(st.just("truncate"), st.integers(0, 1000)),
    st.tuples(st.just("truncate past the end"), st.integers(1, 50)),
    st.tuples(st.just("truncate fully"), st.integers(-200, 200)),
    st.tuples(st.just("reopen"), st.sampled_from([(False, None), (True, None), (True, 0), (True, "point")])),
)


class Model:
    """What the log must hold: its start, its bytes, where its sets begin, its epochs."""

    def __init__(self):
        self.start, self.data, self.boundaries, self.epochs, self.next_epoch = 0, b"", [0], [], 0

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    def cut(self, offset: int) -> None:
        if offset > self.end:
            return
        self.data = self.data[:offset - self.start]
        self.boundaries = [b for b in self.boundaries if b <= offset]
        self.epochs = [entry for entry in self.epochs if entry[1] < offset]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_OPERATIONS, max_size=30))
def test_truncations_and_reopens_match_a_bytes_model(operations):
    with tempfile.TemporaryDirectory() as root:
        opened = []

        def open_log(recover=False, recovery_point=None):
            log = Log.open(root, "p", 0, LogConfig(segment_bytes=100), recover=recover,
                           recovery_point=recovery_point, clock_ms=FakeClock(), timer_ms=FakeClock())
            opened.append(log)
            return log

        log, model, tag = open_log(), Model(), 0
        try:
            for operation in operations:
                kind = operation[0]
                if kind == "append":
                    sets = []
                    for count in operation[1]:
                        sets.append(message_set(count, tag=b"%d-" % tag))
                        tag += 1
                    assert log.append_many(sets, sum(operation[1])) == model.end
                    for one in sets:
                        model.data += one
                        model.boundaries.append(model.end)
                elif kind == "flush":
                    log.flush()
                    assert everything(log) == model.data
                elif kind == "epoch":
                    model.next_epoch += 1
                    assert log.assign_epoch(model.next_epoch)
                    if model.epochs and model.epochs[-1][1] == model.end:
                        model.epochs.pop()
                    model.epochs.append((model.next_epoch, model.end))
                elif kind == "truncate":
                    offset = model.boundaries[operation[1] % len(model.boundaries)]
                    assert log.truncate_to(offset) == offset
                    model.cut(offset)
                elif kind == "truncate past the end":
                    assert log.truncate_to(model.end + operation[1]) == model.end
                elif kind == "truncate fully":
                    offset = max(0, model.end + operation[1])
                    log.truncate_fully_and_start_at(offset)
                    model.start, model.data, model.boundaries, model.epochs = offset, b"", [offset], []
                else:
                    recover, point = operation[1]
                    point = log.recovery_point if point == "point" else point
                    log.close()
                    log = open_log(recover, point)
                    assert log.flushed_end == model.end
                assert (log.log_start, log.log_end) == (model.start, model.end)
                assert model.start <= log.flushed_end <= log.log_end
                assert log.recovery_point is None or log.recovery_point <= log.flushed_end
                files = on_disk(log)
                assert list(files) == [name(base) for base in log.segment_bases]
                assert b"".join(files.values()) == model.data
                assert log.leader_epochs.entries == model.epochs
                assert LeaderEpochs.load(log.directory).entries == model.epochs
            log.flush()
            assert everything(log) == model.data
        finally:
            for each in opened:
                for segment in each._segments:
                    segment.close()


def test_a_file_where_the_partition_directory_goes_is_a_storage_error(tmp_path):
    """Loading the leader epochs first must not turn this into a corrupt-log error: the
    broker answers StorageError (8) for it, which a producer must not retry."""
    from mpbroker.codec.errors import StorageError
    from mpbroker.segments.log import Log
    from mpbroker.segments.log_config import LogConfig

    (tmp_path / "t-0").write_text("")
    with pytest.raises(StorageError, match="cannot list partition directory"):
        Log.open(str(tmp_path), "t", 0, LogConfig(), recover=False)
