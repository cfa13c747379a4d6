"""Producer ids for InitProducerId (``segments.producer_ids``): handed out in order from
blocks reserved durably in ``log.dir``, never twice, across restarts (a new allocator on
the same directory) and from several threads; a file that does not parse is refused;
a block that cannot be written hands nothing out."""

import json
import os
import threading

import pytest

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.segments import producer_ids
from mpbroker.segments.producer_ids import FILE_NAME, MAX_PRODUCER_ID, ProducerIdAllocator, ProducerIdsExhaustedError


def block_on_file(log_dir) -> dict:
    with open(os.path.join(log_dir, FILE_NAME), encoding="ascii") as file:
        return json.load(file)


def test_ids_are_handed_out_in_order_from_a_block_on_file(tmp_path):
    allocator = ProducerIdAllocator(str(tmp_path), broker_id=3)
    assert not (tmp_path / FILE_NAME).exists()  # nothing reserved before the first id
    assert [allocator.next_id() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert allocator.block == (0, 999)
    assert block_on_file(tmp_path) == {"version": 1, "broker": 3, "block_start": "0", "block_end": "999"}
    ids = [allocator.next_id() for _ in range(2000)]
    assert ids == list(range(5, 2005))
    assert block_on_file(tmp_path)["block_start"] == "2000" and allocator.block == (2000, 2999)
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_a_restart_never_hands_out_an_id_again(tmp_path):
    handed_out = set()
    for restart in range(4):
        allocator = ProducerIdAllocator(str(tmp_path))
        ids = [allocator.next_id() for _ in range(1 + 700 * restart)]
        assert handed_out.isdisjoint(ids)
        handed_out.update(ids)
    # What a block had left is skipped: each life starts at a new block (lives of 1, 1, 2 and 3 blocks).
    assert ProducerIdAllocator(str(tmp_path)).next_id() == 1000 * (1 + 1 + 2 + 3)


def test_reserve_takes_a_block_before_the_first_id(tmp_path):
    allocator = ProducerIdAllocator(str(tmp_path), block_size=10)
    allocator.reserve()
    assert block_on_file(tmp_path)["block_end"] == "9"
    allocator.reserve()  # one in hand: nothing more
    assert block_on_file(tmp_path)["block_end"] == "9"
    assert [allocator.next_id() for _ in range(11)] == list(range(11))
    assert block_on_file(tmp_path)["block_start"] == "10"


def test_threads_never_get_the_same_id(tmp_path):
    allocator = ProducerIdAllocator(str(tmp_path), block_size=50)
    got = [[] for _ in range(8)]

    def take(into):
        for _ in range(300):
            into.append(allocator.next_id())

    threads = [threading.Thread(target=take, args=(into,)) for into in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [producer_id for into in got for producer_id in into]
    assert sorted(every) == list(range(2400))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 2, "broker": 0, "block_start": "0", "block_end": "9"}',
                                  '{"version": 1, "block_start": "10", "block_end": "9"}',
                                  '{"version": 1, "block_start": "x", "block_end": "9"}',
                                  '{"version": 1, "block_start": "0"}'])
def test_a_file_that_does_not_parse_is_refused(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    allocator = ProducerIdAllocator(str(tmp_path))
    with pytest.raises(LogCorruptError, match=FILE_NAME):
        allocator.next_id()
    assert (tmp_path / FILE_NAME).read_text() == text  # left for the operator


def test_a_block_that_cannot_be_written_hands_out_nothing(tmp_path, monkeypatch):
    allocator = ProducerIdAllocator(str(tmp_path), block_size=2)
    assert [allocator.next_id(), allocator.next_id()] == [0, 1]

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(producer_ids, "replace_file", full)
    with pytest.raises(StorageError, match="No space left"):
        allocator.next_id()
    monkeypatch.undo()
    assert allocator.next_id() == 2  # the block after the one on file


def test_the_last_ids(tmp_path):
    (tmp_path / FILE_NAME).write_text(json.dumps({"version": 1, "broker": -1, "block_start": "0",
                                                  "block_end": str(MAX_PRODUCER_ID - 2)}))
    allocator = ProducerIdAllocator(str(tmp_path))
    assert [allocator.next_id(), allocator.next_id()] == [MAX_PRODUCER_ID - 1, MAX_PRODUCER_ID]
    with pytest.raises(ProducerIdsExhaustedError):
        allocator.next_id()
