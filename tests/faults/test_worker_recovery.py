"""A worker's death and the broker's restart against real processes: the respawned
worker takes over a partition-table entry its predecessor was killed in the middle
of writing; recovery starts at the recovery point (published in the table for a
respawn, checkpointed in log.dir for a restart) instead of rescanning whole segments;
a partition directory removed under a running broker is noticed; pipelined produces
do not grow segments past log.file.size."""

import os
import shutil
import signal
import struct
import time

from mpbroker.codec import requests as rq
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from mpbroker.ipc import partition_table as pt
from mpbroker.ipc.shared_memory import PARTITIONS_PER_WORKER
from mpbroker.segments.recovery_points import read_checkpoint
from tests.broker.harness import wait_dead
from tests.broker.wire import WireClient
from tests.polling import wait_for

_TABLE_BYTES = -(-(pt._HEADER_BYTES + PARTITIONS_PER_WORKER * pt.ENTRY_BYTES) // 4096) * 4096
_COUNT = struct.Struct("<Q")
_SEQ = struct.Struct("<Q")


def produce_flushed(port: int, topic: str, sets: int, set_bytes: int = 10_000) -> int:
    """``sets`` acknowledged-durable message sets of about ``set_bytes``; the log end."""
    payload = b"p" * (set_bytes // 10 - 10)
    with WireClient(port) as client:
        for number in range(sets):
            ack = client.produce_acked(topic, 0, encode_message_set([b"%06d" % number + payload] * 10))
            assert ack.error == ErrorCode.NO_ERROR
    return ack.next_offset


def partition_status(broker, topic: str) -> dict:
    return next(p for p in broker.status()["partitions"] if p["topic"] == topic)


def segment_file(broker, topic: str, base: int = 0) -> str:
    return os.path.join(broker.log_dir, f"{topic}-0", f"{base:020d}.kafka")


def rot_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def worker_respawned(broker, slot: int, old_pid: int, timeout: float = 10.0) -> dict:
    return broker.wait_until(lambda s: s["workers"][slot]["pid"] not in (None, old_pid)
                             and s["workers"][slot]["state"] == "up", timeout=timeout, what=f"worker {slot} back up")


# --- a worker killed in the middle of updating its partition table ------------------


def table_entry_address(pid: int, topic: str, partition: int) -> int:
    """Address, in process ``pid``, of the seq word of ``topic``-``partition``'s entry in
    the partition tables (anonymous shared memory mapped by every broker process)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for line in maps:
            span, permissions = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if end - start != _TABLE_BYTES or permissions != "rw-s":
                continue
            memory.seek(start)
            (count,) = _COUNT.unpack(memory.read(8))
            entries = memory.read(count * pt.ENTRY_BYTES)
            for index in range(count):
                at = pt._HEADER_BYTES + index * pt.ENTRY_BYTES - 8  # entries were read from after the count
                number = pt._FIELDS.unpack_from(entries, at + pt._FIELDS_AT)[-1]
                (length,) = pt._NAME_LENGTH.unpack_from(entries, at + pt._NAME_AT)
                name_at = at + pt._NAME_AT + pt._NAME_LENGTH.size
                if (entries[name_at:name_at + length], number) == (topic.encode(), partition):
                    return start + pt._HEADER_BYTES + index * pt.ENTRY_BYTES
    raise AssertionError(f"no partition table entry of {topic}-{partition} in process {pid}")


def test_a_worker_killed_mid_update_of_its_table_entry_comes_back(broker):
    """The worker is stopped, its entry's seq made odd (as a SIGKILL between the
    seqlock's two stores leaves it), then killed: its respawn rewrites the entry and
    serves the partition again (it used to wait for an even seq, exit 1 and stay down
    behind a growing back-off, its partitions answering error 7)."""
    produce_flushed(broker.port, "torn", 3)
    slot = partition_status(broker, "torn")["worker"]
    pid = broker.worker_pid(slot)
    address = table_entry_address(pid, "torn", 0)
    os.kill(pid, signal.SIGSTOP)
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as memory:
        memory.seek(address)
        (seq,) = _SEQ.unpack(memory.read(8))
        memory.seek(address)
        memory.write(_SEQ.pack(seq | 1))
    os.kill(pid, signal.SIGKILL)
    wait_dead([pid])
    worker_respawned(broker, slot, pid, timeout=5)
    with WireClient(broker.port) as client:
        ack = client.produce_acked("torn", 0, encode_message_set([b"after"]))
        assert ack.error == ErrorCode.NO_ERROR
        error, data = client.fetch("torn", 0, ack.offset)
        assert error == ErrorCode.NO_ERROR and b"after" in data
    assert broker.status()["workers"][slot]["restarts"] == 1


# --- recovery from the recovery point -------------------------------------------------


def test_a_respawned_worker_recovers_from_the_published_recovery_point(broker):
    """Only what lies past the flushed end is scanned after a worker's death (it used
    to rescan the whole last segment: up to 1 GB). A byte that rots in the flushed part
    therefore does not cut the log (the consumers' CRC check finds it), where the old
    scan truncated every flushed message after it."""
    end = produce_flushed(broker.port, "respawn", 100)
    rot_byte(segment_file(broker, "respawn"), end // 2)
    slot = partition_status(broker, "respawn")["worker"]
    pid = broker.worker_pid(slot)
    os.kill(pid, signal.SIGKILL)
    worker_respawned(broker, slot, pid)
    assert partition_status(broker, "respawn")["log_end"] == end
    scanned = [int(line.split("recovered: ")[1].split()[0]) for line in broker.output().splitlines()
               if f"worker {slot}" in line and "recovered: " in line]
    assert scanned[-1] == 0, scanned  # the respawn's: everything was flushed, nothing to scan


def test_a_restart_after_a_crash_recovers_from_the_checkpoint(broker_factory):
    """The whole broker killed: recovery starts at the checkpointed recovery point. A
    torn tail after it is cut, the rotten byte before it is left to the consumers."""
    broker = broker_factory(log_flush_offset_checkpoint_interval_ms=100)
    end = produce_flushed(broker.port, "restart", 100)
    slot = partition_status(broker, "restart")["worker"]
    checkpoint = os.path.join(broker.log_dir, f"recovery-point-offset-checkpoint.worker{slot}of2")
    wait_for(lambda: (read_checkpoint(checkpoint) or {}).get(("restart", 0)) == end, timeout=10,
             what="the recovery point checkpointed")
    broker.kill_tree()
    path = segment_file(broker, "restart")
    rot_byte(path, end // 2)
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01\x00torn")
    broker.start()
    assert partition_status(broker, "restart")["log_end"] == end
    assert "recovering logs" in broker.output()
    with WireClient(broker.port) as client:
        assert client.produce_acked("restart", 0, encode_message_set([b"next"])).offset == end


def test_a_power_cut_before_the_first_checkpoint_interval_leaves_no_gap_to_refuse(broker_factory):
    """A new log.dir: each worker writes its checkpoint before it takes a produce, so
    a partition created afterwards is known to lie wholly past it. A power cut right
    away (here: a kill, then an old segment's unflushed tail taken off by hand) leaves
    a gap that recovery ends the log at; without that first file, recovery had no
    recovery point and refused the gap (a CI run of the power-cut test hit this)."""
    broker = broker_factory(log_file_size=4096, log_flush_offset_checkpoint_interval_ms=3_600_000)
    for slot in range(2):
        assert read_checkpoint(os.path.join(broker.log_dir, f"recovery-point-offset-checkpoint.worker{slot}of2")) == {}
    message_set = encode_message_set([b"x" * 190] * 10)
    with WireClient(broker.port) as client:
        for _ in range(5):
            assert client.produce_acked("young", 0, message_set, durability=0).error == ErrorCode.NO_ERROR
    broker.kill_tree()
    directory = os.path.join(broker.log_dir, "young-0")
    first, *later = sorted(os.listdir(directory))
    assert later, "the test needs a roll"
    message_bytes = len(message_set) // 10
    cut = os.path.getsize(os.path.join(directory, first)) // 2 + message_bytes // 2  # inside a message
    with open(os.path.join(directory, first), "r+b") as f:  # the first segment lost its tail; the rest stayed
        f.truncate(cut)
    broker.start()
    assert partition_status(broker, "young")["log_end"] == cut - cut % message_bytes
    assert sorted(os.listdir(directory)) == [first]


# --- a partition directory removed under the broker -----------------------------------


def test_a_removed_partition_directory_fails_its_produces_loudly(broker):
    """rm -rf of a partition directory while the broker runs: acknowledging produces
    as flushed would be a lie (the data is gone at the next start), so they get
    StorageError (8); other partitions go on; the worker stays up."""
    produce_flushed(broker.port, "doomed", 2)
    produce_flushed(broker.port, "kept", 2)
    shutil.rmtree(os.path.join(broker.log_dir, "doomed-0"))
    with WireClient(broker.port) as client:
        first = client.produce_acked("doomed", 0, encode_message_set([b"into the void"]))
        assert first.error == ErrorCode.STORAGE_ERROR
        later = client.produce_acked("doomed", 0, encode_message_set([b"again"]), durability=0)
        assert later.error == ErrorCode.STORAGE_ERROR
        assert client.produce_acked("kept", 0, encode_message_set([b"fine"])).error == ErrorCode.NO_ERROR
        time.sleep(0.5)  # many flush ticks (20 ms): the failed log is not flushed (nor reported) again
    output = broker.output()
    critical = [line for line in output.splitlines() if "CRITICAL" in line
                and "doomed-0/00000000000000000000.kafka was removed while the broker ran" in line]
    assert len(critical) == 1, output
    assert all(worker["restarts"] == 0 for worker in broker.status()["workers"])


# --- segment sizes under pipelined produces -------------------------------------------


def test_pipelined_produces_roll_segments_at_the_size_limit(broker_factory):
    """Many produces arrive in one ring batch and are appended together: the log rolls
    between their sets, so no segment exceeds log.file.size by more than one set (with
    65536, segments of 1.4 MB appeared)."""
    limit = 65_536
    broker = broker_factory(log_file_size=limit)
    message_set = encode_message_set([b"x" * 190] * 10)
    frames = b"".join(rq.encode_produce("piped", 0, message_set) for _ in range(2000))
    with WireClient(broker.port) as client:
        client.send(frames)
        end = client.produce_acked("piped", 0, encode_message_set([b"last"])).next_offset
    directory = os.path.join(broker.log_dir, "piped-0")
    sizes = [os.path.getsize(os.path.join(directory, name)) for name in sorted(os.listdir(directory))]
    assert sum(sizes) == end and len(sizes) >= end // limit
    assert max(sizes) <= limit, f"segments of {max(sizes)} bytes with log.file.size={limit}"
