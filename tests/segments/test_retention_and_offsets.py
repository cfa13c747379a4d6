"""Retention by age and by size (whole segments, an active one always remains) and the
OFFSETS answers (latest, earliest, before a time)."""

import os

from mpbroker.segments.offsets import offsets_before
from mpbroker.segments.retention import excess_by_size, expired_by_age

from .conftest import message_set

HOUR = 3600 * 1000


def set_mtime(segment, ms):
    os.utime(segment.path, ns=(ms * 1_000_000, ms * 1_000_000))


def filled(open_log, sets, **config):
    chunk = message_set(4)
    log = open_log(segment_bytes=len(chunk), **config)
    for _ in range(sets):
        log.append(chunk, 4)
    log.flush()
    return log, len(chunk)


def test_age_retention_deletes_only_old_segments(open_log, clock):
    log, chunk = filled(open_log, 4, retention_ms=HOUR)
    for index, segment in enumerate(log._segments):
        set_mtime(segment, clock() - HOUR * (10 - index) if index < 2 else clock())
    deleted = log.apply_retention()
    assert deleted == [0, chunk]
    assert log.segment_bases == [chunk * 2, chunk * 3]
    assert log.log_start == chunk * 2
    assert not os.path.exists(os.path.dirname(log._segments[0].path) + "/00000000000000000000.kafka")


def test_age_stops_at_the_first_young_segment(open_log, clock):
    log, chunk = filled(open_log, 3, retention_ms=HOUR)
    set_mtime(log._segments[0], clock())
    set_mtime(log._segments[1], clock() - 2 * HOUR)
    set_mtime(log._segments[2], clock())
    assert log.apply_retention() == []


def test_when_everything_expired_a_fresh_active_segment_remains(open_log, clock):
    log, chunk = filled(open_log, 3, retention_ms=HOUR)
    for segment in log._segments:
        set_mtime(segment, clock() - 2 * HOUR)
    end = log.log_end
    assert log.apply_retention() == [0, chunk, chunk * 2]
    assert log.segment_bases == [end] and log.size == 0
    assert log.read(end, 100).length == 0
    assert log.append(message_set(1), 1) == end


def test_size_retention_keeps_the_log_within_the_limit(open_log):
    log, chunk = filled(open_log, 5, retention_bytes=1)
    # 1 byte is below any segment: everything but the active segment goes.
    assert log.apply_retention() == [0, chunk, chunk * 2, chunk * 3]
    assert log.segment_count == 1


def test_size_retention_exact(open_log):
    chunk = len(message_set(4))
    log, _ = filled(open_log, 5, retention_bytes=chunk * 2)
    assert log.apply_retention() == [0, chunk, chunk * 2]
    assert log.size == chunk * 2


def test_retention_pure_functions():
    assert expired_by_age([0, 10, 20, 30], now_ms=100, retention_ms=85) == 2
    assert expired_by_age([], 100, 1) == 0
    assert excess_by_size([10, 10, 10, 10], 25) == 2
    assert excess_by_size([10, 10, 10, 10], 40) == 0
    assert excess_by_size([10, 10, 10, 10], -1) == 0
    assert excess_by_size([100], 1) == 0  # the active segment always remains


def test_segment_being_flushed_is_not_deleted(open_log, clock):
    log, chunk = filled(open_log, 3, retention_ms=HOUR)
    log.append(message_set(1), 1)
    log._segments[0].dirty = True
    pending = log.begin_flush()
    for segment in log._segments:
        set_mtime(segment, clock() - 2 * HOUR)
    assert log.apply_retention() == []  # segment 0 is still being synced
    log.finish_flush(pending)
    assert len(log.apply_retention()) == 4


def test_offsets_latest_and_earliest(open_log):
    log, chunk = filled(open_log, 3)
    assert log.offsets_before(-1, 1) == [chunk * 3]
    assert log.offsets_before(-2, 1) == [0]
    assert log.offsets_before(-1, 10) == [chunk * 3, chunk * 2, chunk, 0]


def test_offsets_before_a_time(open_log, clock):
    log, chunk = filled(open_log, 3)
    now = clock()
    for index, segment in enumerate(log._segments):
        set_mtime(segment, now - (3 - index) * HOUR)  # -3h, -2h, -1h
    assert log.offsets_before(now - 2 * HOUR, 10) == [chunk, 0]
    assert log.offsets_before(now - 2 * HOUR, 1) == [chunk]
    assert log.offsets_before(now - 4 * HOUR, 10) == []
    assert log.offsets_before(now, 10) == [chunk * 3, chunk * 2, chunk, 0]


def test_offsets_use_the_flushed_end():
    segments = [(0, 10), (100, 20)]
    assert offsets_before(segments, 150, -1, 5, 99) == [150, 100, 0]
    # a rolled segment whose predecessor is not flushed yet is not offered
    assert offsets_before(segments, 80, -1, 5, 99) == [80, 0]
    assert offsets_before(segments, 100, -1, 5, 99) == [100, 0]
    assert offsets_before([], 0, -1, 5, 99) == [0]
    assert offsets_before([], 0, -2, 5, 99) == [0]
    assert offsets_before([], 0, 12345, 5, 99) == []
    assert offsets_before(segments, 150, -1, 0, 99) == []
