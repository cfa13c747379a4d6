"""A replicated partition's leader epochs (mpbroker.segments.leader_epochs): recorded
as sets are appended under new epochs, the answer a leader gives a follower asking
where an epoch ended (the truncation point, never the follower's high watermark),
truncation at either end, the file in Kafka's checkpoint text written atomically, a
damaged file refused by name, and recovery leaving the file alone."""

import logging
import os

import pytest

from mpbroker.codec.errors import LogCorruptError
from mpbroker.segments.leader_epochs import FILE_NAME, UNDEFINED, EpochEntry, LeaderEpochs
from mpbroker.segments.log import Log
from mpbroker.segments.log_config import LogConfig


def test_epochs_are_recorded_when_a_newer_one_appends():
    epochs = LeaderEpochs("/nowhere")
    assert epochs.assign(0, 0)
    assert not epochs.assign(0, 500)  # the same epoch goes on
    assert epochs.assign(2, 800)
    assert epochs.assign(3, 800)  # epoch 2 began at 800 and holds nothing: replaced
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 800)]
    assert not epochs.assign(1, 900)  # older than the latest
    with pytest.raises(ValueError, match="starts before"):
        epochs.assign(4, 700)


def test_where_an_epoch_ended():
    epochs = LeaderEpochs("/nowhere", [EpochEntry(1, 0), EpochEntry(3, 1000), EpochEntry(6, 2500)])
    log_end = 4000
    assert epochs.end_offset_for(6, log_end) == EpochEntry(6, 4000)  # the latest: the log end
    assert epochs.end_offset_for(7, log_end) == EpochEntry(6, 4000)
    assert epochs.end_offset_for(3, log_end) == EpochEntry(3, 2500)  # ended where epoch 6 began
    assert epochs.end_offset_for(4, log_end) == EpochEntry(3, 2500)  # no epoch 4 here: 3 is the largest below
    assert epochs.end_offset_for(1, log_end) == EpochEntry(1, 1000)
    assert epochs.end_offset_for(0, log_end) == EpochEntry(UNDEFINED, UNDEFINED)
    assert LeaderEpochs("/nowhere").end_offset_for(5, 10) == EpochEntry(UNDEFINED, UNDEFINED)


def test_truncation_at_either_end():
    epochs = LeaderEpochs("/nowhere", [EpochEntry(1, 0), EpochEntry(3, 1000), EpochEntry(6, 2500)])
    assert not epochs.truncate_from_end(3000)
    assert epochs.truncate_from_end(2500)  # epoch 6 began at the cut: it goes
    assert epochs.entries == [EpochEntry(1, 0), EpochEntry(3, 1000)]
    assert epochs.truncate_from_start(1200)
    assert epochs.entries == [EpochEntry(3, 1200)]
    epochs = LeaderEpochs("/nowhere", [EpochEntry(1, 0), EpochEntry(3, 1000)])
    assert epochs.truncate_from_start(1000) and epochs.entries == [EpochEntry(3, 1000)]


def test_the_file_round_trip_in_kafkas_text(tmp_path):
    epochs = LeaderEpochs(str(tmp_path))
    epochs.assign(0, 0)
    epochs.assign(4, 1234)
    epochs.write()
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n0 0\n4 1234\n"
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()
    assert LeaderEpochs.load(str(tmp_path)).entries == [EpochEntry(0, 0), EpochEntry(4, 1234)]
    assert LeaderEpochs.load(str(tmp_path / "none")).entries == []


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\n0 0\n", "0\n1\n0 0", "0\n2\n3 10\n2 20\n", "0\n1\nx 1\n",
                                  "0\n2\n1 10\n2 5\n", "0\n1\n-1 0\n"])
def test_a_damaged_file_is_refused_by_name(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(LogCorruptError, match=FILE_NAME):
        LeaderEpochs.load(str(tmp_path))


def test_recovery_leaves_the_epoch_file_alone_and_quiet(tmp_path, caplog):
    directory = tmp_path / "t-0"
    log = Log.open(str(tmp_path), "t", 0, LogConfig(), recover=False)
    log.close()
    epochs = LeaderEpochs(str(directory))
    epochs.assign(0, 0)
    epochs.write()
    caplog.set_level(logging.WARNING)
    reopened = Log.open(str(tmp_path), "t", 0, LogConfig(), recover=True)
    reopened.close()
    assert not [r for r in caplog.records if FILE_NAME in r.getMessage()]
    assert os.path.exists(directory / FILE_NAME)
