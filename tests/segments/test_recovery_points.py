"""The recovery-point checkpoint file: Kafka 0.8's text format, atomic replacement, a
name no partition directory can have, files of another num.workers removed."""

import os

import pytest

from mpbroker.segments.naming import parse_partition_dir
from mpbroker.segments.recovery_points import (
    checkpoint_path,
    parse_checkpoint,
    read_checkpoint,
    remove_other_layouts,
    write_checkpoint,
)


def test_round_trip_in_kafkas_format(tmp_path):
    path = checkpoint_path(str(tmp_path), 1, 4)
    write_checkpoint(path, {("clicks", 3): 1200, ("a.b_c-d", 0): -1, ("clicks", 0): 0})
    assert open(path).read() == "0\n3\na.b_c-d 0 -1\nclicks 0 0\nclicks 3 1200\n"
    assert read_checkpoint(path) == {("clicks", 3): 1200, ("a.b_c-d", 0): -1, ("clicks", 0): 0}
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # the temporary file was renamed
    write_checkpoint(path, {})
    assert read_checkpoint(path) == {}


def test_no_file_is_none_and_a_damaged_one_is_ignored_with_a_warning(tmp_path, caplog):
    path = checkpoint_path(str(tmp_path), 0, 1)
    assert read_checkpoint(path) is None
    for text in ("", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\n1\nt 0 -7\n", "\xff"):
        with open(path, "w", encoding="latin-1") as f:
            f.write(text)
        assert read_checkpoint(path) is None, text
    assert "recovering without them" in caplog.text or "ignoring the recovery points" in caplog.text


@pytest.mark.parametrize("slot,workers", [(0, 1), (2, 3), (255, 256)])
def test_a_checkpoint_name_is_never_a_partition_directory_name(slot, workers):
    name = os.path.basename(checkpoint_path("/data", slot, workers))
    assert parse_partition_dir(name) is None and parse_partition_dir(name + ".tmp") is None


def test_checkpoints_of_another_num_workers_are_removed(tmp_path):
    for slot, workers in ((0, 2), (1, 2), (0, 3), (2, 3)):
        write_checkpoint(checkpoint_path(str(tmp_path), slot, workers), {("t", slot): 1})
    (tmp_path / "clicks-0").mkdir()
    remove_other_layouts(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == sorted(["clicks-0", os.path.basename(checkpoint_path("", 0, 2)),
                                                   os.path.basename(checkpoint_path("", 1, 2))])


def test_parse_checks_the_count():
    with pytest.raises(ValueError, match="header says 2"):
        parse_checkpoint("0\n2\nt 0 1\n")
