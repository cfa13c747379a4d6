"""Storage faults against a real broker process tree (issue 9).

Acknowledged messages are produced, the broker is stopped (SIGKILL of the whole tree,
or a graceful stop), segment files are damaged, and the broker is started again. The
guarantees checked (ARCHITECTURE.md, "The partition log"):

- a torn or corrupt tail of the last segment (cut mid-message, garbage after it, a bad
  byte inside it) is truncated at the first bad message: what precedes it is served,
  nothing after it is, and new produces append right behind it;
- a corrupt byte in an older segment is not looked for at start-up: the file is left
  exactly as it is, the rest of the log is served, and the consumer's CRC check refuses
  the bad message (``mpbroker.segments.verify`` finds it offline);
- what truncation cannot repair (a missing, extra, empty or cut-short segment before
  the last, a misnamed or unopenable segment file) makes the broker refuse to start,
  with a message naming the partition directory and the file, and without changing a
  byte on disk; after the operator's repair everything is there; other files are left
  alone with a warning naming them;
- a full disk (a small tmpfs, or RLIMIT_FSIZE) fails produces with error 8 without a
  hang or a worker restart, keeps the log whole and fetchable, and produces work again
  as soon as there is room, without a restart; a restart then loses nothing;
- a failing fdatasync (an LD_PRELOAD shim) fails the flush acknowledgements it owed with
  error 7, the worker exits with code 3 and its respawn recovers; nothing acknowledged is lost.

After every start: every message from offset 0 to the end is fetched, each answer is
whole, CRC-valid messages, and equals exactly what was acknowledged before the damage
point (offsets included, so they are contiguous).
"""

import hashlib
import os
import resource
import shutil
import subprocess
import time
from collections import defaultdict

import pytest

from mpbroker.clients import SimpleConsumer
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode, InvalidMessageError
from mpbroker.codec.message import encode_message, encode_message_set
from mpbroker.codec.message_set import iter_messages, validate_message_set
from mpbroker.segments import verify
from mpbroker.segments.naming import segment_file_name
from mpbroker.segments.recovery_points import is_checkpoint_file
from tests.broker.wire import WireClient

TOPIC = "stored"
PARTITIONS = 4
SEGMENT_BYTES = 2048  # log.file.size: a few segments per partition
SETS_PER_PARTITION = 12
MESSAGES_PER_SET = 5
PAYLOAD_BYTES = 60  # a message is 70 bytes, a set 350: 5 sets per segment
FETCH_SIZE = 1 << 20  # more than a segment: every answer ends at a segment end or the log end
MESSAGE_OVERHEAD = 10  # [length:4][magic:1][attributes:1][crc:4]
MESSAGE_BYTES = MESSAGE_OVERHEAD + PAYLOAD_BYTES


# --- what was acknowledged, what is served --------------------------------------------------


class Acked:
    """Every acknowledged message per partition, in offset order: (offset, next_offset, payload)."""

    def __init__(self):
        self.messages = defaultdict(list)

    def record(self, partition: int, offset: int, message_set: bytes) -> None:
        for next_offset, payload in iter_messages(message_set, offset):
            self.messages[partition].append((offset, next_offset, payload))
            offset = next_offset

    def end(self, partition: int) -> int:
        found = self.messages[partition]
        return found[-1][1] if found else 0

    def before(self, partition: int, damage_offset: int) -> list:
        """The acknowledged messages that lie wholly before ``damage_offset``."""
        return [message for message in self.messages[partition] if message[1] <= damage_offset]


def payloads_for(tag: str, count: int = MESSAGES_PER_SET) -> list:
    return [f"{tag}-m{n}".encode().ljust(PAYLOAD_BYTES, b".") for n in range(count)]


def produce(port: int, acked: Acked, tag: str, sets: int = SETS_PER_PARTITION * PARTITIONS,
            partitions=range(PARTITIONS), mixed: bool = False) -> None:
    """Acknowledged produces, round robin over ``partitions``, one request per partition in
    flight at a time (pipelined). Durability flush, or with ``mixed`` append and flush by turns."""
    partitions = list(partitions)
    with WireClient(port) as client:
        for first in range(0, sets, len(partitions)):
            sent = []
            for n in range(first, min(sets, first + len(partitions))):
                partition = partitions[n % len(partitions)]
                message_set = encode_message_set(payloads_for(f"{tag}-s{n}"))
                durability = (n // len(partitions)) % 2 if mixed else 1
                client.send(rq.encode_produce_acked(durability, TOPIC, partition, message_set))
                sent.append((n, partition, message_set))
            for n, partition, message_set in sent:
                ack = rs.decode_produce_ack(client.receive())
                assert ack.error == 0, f"produce {tag}-s{n} to partition {partition}: error {ack.error}"
                assert ack.next_offset - ack.offset == len(message_set)
                acked.record(partition, ack.offset, message_set)


def served(port: int, partition: int) -> list:
    """Every message of a partition from offset 0 to the end, as fetched: each answer must
    be whole messages that pass their CRC (an answer never crosses a segment end)."""
    messages = []
    with WireClient(port) as client:
        error, ends = client.offsets(TOPIC, partition, -1, 1)
        assert error == 0
        end = ends[0]
        offset = 0
        while offset < end:
            error, data = client.fetch(TOPIC, partition, offset, FETCH_SIZE)
            assert error == 0, f"fetch {TOPIC}-{partition}@{offset}: error {error}"
            assert data, f"empty answer at {offset}, before the log end {end}"
            validation = validate_message_set(data)
            assert validation.complete, f"{TOPIC}-{partition}@{offset}: {validation.error}"
            for next_offset, payload in iter_messages(data, offset):
                messages.append((offset, next_offset, payload))
                offset = next_offset
    return messages


def assert_served(port: int, acked: Acked, damaged: dict = None) -> None:
    """Each partition serves exactly what was acknowledged (before its damage offset, if any)."""
    damaged = damaged or {}
    for partition in range(PARTITIONS):
        expected = acked.before(partition, damaged.get(partition, 1 << 62))
        got = served(port, partition)
        lost = len(set(expected) - set(got))
        assert lost == 0, f"partition {partition}: {lost} acknowledged messages lost"
        assert got == expected, f"partition {partition}: serves {len(got)} messages, expected {len(expected)}"


# --- files -----------------------------------------------------------------------------------


def partition_dir(broker, partition: int) -> str:
    return os.path.join(broker.log_dir, f"{TOPIC}-{partition}")


def segment_paths(broker, partition: int) -> list:
    directory = partition_dir(broker, partition)
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory)) if name.endswith(".kafka")]


def base_of(path: str) -> int:
    return int(os.path.basename(path).split(".")[0])


def snapshot(broker) -> dict:
    """The SHA-256 of every file under every partition directory, by path."""
    found = {}
    for partition in range(PARTITIONS):
        directory = partition_dir(broker, partition)
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if os.path.isdir(path):
                found[path] = "directory"
                continue
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def flip_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x5A]))


def filled_broker(broker_factory, stop: str = "kill", **properties):
    """A broker that took SETS_PER_PARTITION acknowledged sets per partition, then was
    stopped (``kill``: SIGKILL of the tree; ``graceful``: TERM).

    Its recovery-point checkpoints are then removed, so recovery runs as for a log.dir
    from before checkpoints (the whole last segment is checked, a gap anywhere is
    refused): the damage here is the operator's or the disk's, not a crash's. Recovery
    from a recovery point is tested in test_worker_recovery.py, test_power_cut.py and
    tests/segments/test_recovery.py."""
    broker = broker_factory(log_file_size=SEGMENT_BYTES, **properties)
    acked = Acked()
    produce(broker.port, acked, "before", mixed=True)
    stop_broker(broker, stop)
    for name in os.listdir(broker.log_dir):
        if is_checkpoint_file(name):
            os.unlink(os.path.join(broker.log_dir, name))
    for partition in range(PARTITIONS):
        assert len(segment_paths(broker, partition)) >= 3, "the test needs older segments"
    return broker, acked


def stop_broker(broker, stop: str) -> None:
    if stop == "kill":
        broker.kill_tree()
    else:
        assert broker.stop() == 0


def restart(broker, expect_recovery: bool = True) -> None:
    broker.start()
    if expect_recovery:
        assert "recovering logs" in broker.output().split("mpbroker 0 starting")[-1]


# --- torn and corrupt tails of the last segment ----------------------------------------------


@pytest.mark.parametrize("cut", [  # bytes cut off the end of the last segment
    pytest.param(MESSAGE_BYTES - 2, id="inside-the-last-length-field"),
    pytest.param(MESSAGE_BYTES - 7, id="inside-the-last-header"),
    pytest.param(1, id="one-byte-short"),
    pytest.param(3 * MESSAGE_BYTES - 20, id="three-messages-in"),
])
def test_torn_tail_is_cut_at_the_last_whole_message(broker_factory, cut):
    broker, acked = filled_broker(broker_factory)
    last = segment_paths(broker, 1)[-1]
    end = acked.end(1)
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) - cut)
    torn_at = end - cut  # the first byte that is gone
    whole_end = max(m[1] for m in acked.messages[1] if m[1] <= torn_at)

    restart(broker)

    assert f"recovery: truncating {last}" in broker.output()
    assert os.path.getsize(last) == whole_end - base_of(last)
    assert_served(broker.port, acked, damaged={1: torn_at})
    after = Acked()
    produce(broker.port, after, "after", sets=2, partitions=[1])
    assert after.messages[1][0][0] == whole_end, "new produces append right after the last whole message"
    assert served(broker.port, 1) == acked.before(1, torn_at) + after.messages[1]


@pytest.mark.parametrize("garbage", [
    pytest.param(b"\x00" * 4096, id="zeros"),  # a file extended by a crash before its data landed
    pytest.param(b"\xff" * 50, id="ff"),
    pytest.param((1000).to_bytes(4, "big") + b"\x01\x00abc", id="length-past-the-end"),
    pytest.param(bytearray(encode_message(b"x" * 40)), id="message-with-a-bad-crc"),
])
def test_garbage_after_the_last_segment_is_cut(broker_factory, garbage):
    if isinstance(garbage, bytearray):
        garbage[-1] ^= 0xFF  # a whole message whose payload no longer matches its CRC
    broker, acked = filled_broker(broker_factory)
    last = segment_paths(broker, 2)[-1]
    size = os.path.getsize(last)
    with open(last, "ab") as f:
        f.write(garbage)

    restart(broker)

    assert os.path.getsize(last) == size
    assert_served(broker.port, acked)
    after = Acked()
    produce(broker.port, after, "after", sets=1, partitions=[2])
    assert after.messages[2][0][0] == acked.end(2)


@pytest.mark.parametrize("field, position", [
    ("length", 3),  # low byte of the length: the message now ends elsewhere
    ("magic", 4),
    ("crc", 7),
    ("payload", MESSAGE_OVERHEAD + 20),
])
def test_corrupt_byte_in_the_last_segment_truncates_there(broker_factory, field, position):
    broker, acked = filled_broker(broker_factory)
    last = segment_paths(broker, 3)[-1]
    in_last = [m for m in acked.messages[3] if m[0] >= base_of(last)]
    victim = in_last[len(in_last) // 2]  # a message in the middle of the last segment
    flip_byte(last, victim[0] - base_of(last) + position)

    restart(broker)

    assert os.path.getsize(last) == victim[0] - base_of(last)
    assert_served(broker.port, acked, damaged={3: victim[0]})  # the corrupt message is never served
    after = Acked()
    produce(broker.port, after, "after", sets=1, partitions=[3])
    assert after.messages[3][0][0] == victim[0]


def test_zero_length_last_segment_is_fine(broker_factory):
    broker, acked = filled_broker(broker_factory)
    last = segment_paths(broker, 0)[-1]
    with open(last, "r+b") as f:
        f.truncate(0)

    restart(broker)

    assert_served(broker.port, acked, damaged={0: base_of(last)})
    after = Acked()
    produce(broker.port, after, "after", sets=1, partitions=[0])
    assert after.messages[0][0][0] == base_of(last)


# --- damage in an older segment --------------------------------------------------------------


@pytest.mark.parametrize("stop", ["graceful", "kill"])
def test_corrupt_byte_in_an_older_segment_is_left_alone_and_refused_by_the_consumer(
        broker_factory, stop):
    broker, acked = filled_broker(broker_factory, stop=stop)
    first = segment_paths(broker, 1)[0]
    victim = acked.messages[1][2]  # the third message of the first segment
    flip_byte(first, victim[0] + MESSAGE_OVERHEAD + 5)
    before = snapshot(broker)

    restart(broker, expect_recovery=stop == "kill")

    assert snapshot(broker) == before, "recovery changed an older segment (or the clean last ones)"
    # The consumer's CRC check refuses the bad message, naming its offset.
    with WireClient(broker.port) as client:
        error, data = client.fetch(TOPIC, 1, 0, FETCH_SIZE)
    assert error == 0
    assert validate_message_set(data).valid_bytes == victim[0]
    with pytest.raises(InvalidMessageError, match=f"offset {victim[0]} fails its CRC"):
        list(iter_messages(data, 0))
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        handed_out = []
        with pytest.raises(InvalidMessageError):
            for message in consumer.messages(TOPIC, 1, 0):
                handed_out.append(message.payload)
    good_before = [m[2] for m in acked.messages[1][:2]]
    assert handed_out == good_before[:len(handed_out)], "nothing from the bad message on is handed out"
    # Everything else is served as it was acknowledged: the rest of that segment and the later ones.
    second = base_of(segment_paths(broker, 1)[1])
    rest_of_first = [m for m in acked.messages[1] if victim[1] <= m[0] < second]
    assert served_from(broker.port, 1, victim[1], second) == rest_of_first
    assert served_from(broker.port, 1, second, acked.end(1)) == [m for m in acked.messages[1] if m[0] >= second]
    for partition in (0, 2, 3):
        assert served(broker.port, partition) == acked.messages[partition]
    # The offline check finds it.
    report = verify.verify_partition(partition_dir(broker, 1))
    assert [(p.file, p.offset) for p in report.problems] == [(os.path.basename(first), victim[0])]
    # Produces go on.
    after = Acked()
    produce(broker.port, after, "after", sets=1, partitions=[1])
    assert after.messages[1][0][0] == acked.end(1)


def served_from(port: int, partition: int, offset: int, end: int) -> list:
    """The messages of ``[offset, end)`` (a range without damage), as fetched."""
    messages = []
    with WireClient(port) as client:
        while offset < end:
            error, data = client.fetch(TOPIC, partition, offset, min(FETCH_SIZE, end - offset))
            assert error == 0 and data
            assert validate_message_set(data).complete
            for next_offset, payload in iter_messages(data, offset):
                messages.append((offset, next_offset, payload))
                offset = next_offset
    return messages


# --- damage recovery must not guess about: refused --------------------------------------------


def _missing_middle(broker):
    path = segment_paths(broker, 1)[1]
    saved = open(path, "rb").read()
    os.unlink(path)

    def repair():
        with open(path, "wb") as f:
            f.write(saved)
    return 1, os.path.basename(path), [f"no file holds offsets {base_of(path)} to",
                                       "missing, extra or damaged"], repair


def _extra_after_the_end(broker):
    path = os.path.join(partition_dir(broker, 2), segment_file_name(999_999))
    with open(path, "wb") as f:
        f.write(encode_message(b"stray"))
    return 2, os.path.basename(path), ["next segment starts at 999999"], lambda: os.unlink(path)


def _extra_inside(broker):
    path = os.path.join(partition_dir(broker, 2), segment_file_name(100))
    with open(path, "wb") as f:
        f.write(encode_message(b"stray"))
    return 2, os.path.basename(path), ["the next segment starts at 100", "inside it"], lambda: os.unlink(path)


def _empty_middle(broker):
    path = segment_paths(broker, 3)[1]
    saved = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.truncate(0)

    def repair():
        with open(path, "wb") as f:
            f.write(saved)
    return 3, os.path.basename(path), ["is empty but the next segment starts at"], repair


def _middle_cut_short(broker):
    path = segment_paths(broker, 0)[1]
    saved = open(path, "rb").read()
    with open(path, "r+b") as f:
        f.truncate(len(saved) - 30)

    def repair():
        with open(path, "wb") as f:
            f.write(saved)
    return 0, os.path.basename(path), [f"ends at offset {base_of(path) + len(saved) - 30}"], repair


def _misnamed(broker):
    """A segment copied under its offset without the leading zeros."""
    original = segment_paths(broker, 0)[1]
    name = f"{base_of(original)}.kafka"
    path = os.path.join(partition_dir(broker, 0), name)
    shutil.copy(original, path)
    return 0, name, ["is named like a segment file but not <20-digit base offset>.kafka"], lambda: os.unlink(path)


def _directory(broker):
    """A directory where the next segment would go (it would fit the offsets)."""
    path = os.path.join(partition_dir(broker, 1), segment_file_name(end_on_disk(broker, 1)))
    os.mkdir(path)
    return 1, os.path.basename(path), ["cannot open segment file", "Is a directory"], lambda: os.rmdir(path)


def _immutable(broker):
    """A segment the broker may not open for writing: chattr +i holds even for root
    (chmod 000 does not)."""
    path = segment_paths(broker, 3)[-1]
    made = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip()}")
    return (3, os.path.basename(path), ["cannot open segment file", "Operation not permitted"],
            lambda: subprocess.run(["chattr", "-i", path], check=True))


def end_on_disk(broker, partition: int) -> int:
    last = segment_paths(broker, partition)[-1]
    return base_of(last) + os.path.getsize(last)


@pytest.mark.parametrize("damage, stop", [
    pytest.param(_missing_middle, "graceful", id="missing-middle-segment"),
    pytest.param(_extra_after_the_end, "kill", id="extra-segment-after-the-end"),
    pytest.param(_extra_inside, "graceful", id="extra-segment-inside-another"),
    pytest.param(_empty_middle, "kill", id="zero-length-middle-segment"),
    pytest.param(_middle_cut_short, "kill", id="middle-segment-cut-short"),
    pytest.param(_misnamed, "graceful", id="misnamed-segment-file"),
    pytest.param(_directory, "kill", id="segment-name-on-a-directory"),
    pytest.param(_immutable, "graceful", id="segment-that-cannot-be-opened"),
])
def test_unrepairable_damage_refuses_to_start_and_changes_nothing(broker_factory, damage, stop):
    broker, acked = filled_broker(broker_factory, stop=stop)
    repair = None
    try:
        partition, file_name, expected_texts, repair = damage(broker)
        before = snapshot(broker)
        with pytest.raises(RuntimeError, match="broker exited with 1"):
            broker.start()
        assert broker.process.returncode == 1
        assert snapshot(broker) == before, "the refused start changed files"
        output = broker.output().split("mpbroker 0 starting")[-1]
        refusal = next(line for line in output.splitlines() if "cannot open the partition logs" in line)
        assert "CRITICAL" in refusal
        assert f"partition directory {partition_dir(broker, partition)}:" in refusal and file_name in refusal
        for text in expected_texts:
            assert text in refusal, refusal
        assert "died: exit code 4" in output and "could not open its logs; stopping the broker" in output
        assert "Traceback" not in output
    finally:
        if repair is not None:
            repair()
    # The operator's repair (the file back, or the odd one moved away) is all it takes.
    restart(broker, expect_recovery=True)
    assert_served(broker.port, acked)


def test_stray_files_are_left_alone_with_a_warning(broker_factory):
    broker, acked = filled_broker(broker_factory, stop="kill")
    directory = partition_dir(broker, 2)
    strays = {
        "notes.txt": b"operator notes",
        f"{segment_file_name(0)}.bak": open(segment_paths(broker, 2)[0], "rb").read(),
        ".hidden": b"",
    }
    for name, content in strays.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(content)
    not_a_directory = os.path.join(broker.log_dir, "other-7")  # where a partition directory would be
    with open(not_a_directory, "wb") as f:
        f.write(b"not a partition")
    before = snapshot(broker)

    restart(broker)

    assert snapshot(broker) == before
    assert open(not_a_directory, "rb").read() == b"not a partition"
    output = broker.output()
    for name in strays:
        assert f"{directory}: ignoring {name}, which is not a segment file" in output
    assert f"ignoring {not_a_directory} in log.dir: named like a partition directory but not a directory" in output
    assert_served(broker.port, acked)


# --- a full disk --------------------------------------------------------------------------------


FULL_SET_PAYLOADS = 10  # 10 x 1,000-byte messages: a 10,100-byte set
FULL_SET_PAYLOAD_BYTES = 1000


@pytest.fixture
def tmpfs():
    """Mounts a tmpfs of the given size at a directory; unmounted (lazily) afterwards."""
    mounted = []

    def mount(path: str, size: str) -> None:
        os.makedirs(path, exist_ok=True)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"mounting a tmpfs needs root (CAP_SYS_ADMIN): {result.stderr.strip()}")
        mounted.append(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], check=False)


class SmallFilesystem:
    """log.dir on a 4 MB tmpfs that also holds a 2 MB filler file; freeing deletes it."""

    name = "tmpfs"
    segment_bytes = 256 * 1024

    def __init__(self, tmpfs):
        self._tmpfs = tmpfs

    def before_start(self, broker) -> None:
        self._tmpfs(broker.log_dir, "4m")
        self.filler = os.path.join(broker.log_dir, "filler")
        with open(self.filler, "wb") as f:
            f.write(b"\0" * (2 << 20))

    def after_start(self, broker) -> None:
        pass

    def free(self, broker) -> None:
        os.unlink(self.filler)


class FileSizeLimit:
    """A soft RLIMIT_FSIZE of 64 KB on the workers (segments may grow to 1 MB); freeing lifts it."""

    name = "rlimit-fsize"
    segment_bytes = 1 << 20
    limit = 64 * 1024

    def __init__(self, tmpfs):
        pass

    def before_start(self, broker) -> None:
        pass

    def after_start(self, broker) -> None:
        for slot in range(2):
            resource.prlimit(broker.worker_pid(slot), resource.RLIMIT_FSIZE, (self.limit, resource.RLIM_INFINITY))

    def free(self, broker) -> None:
        unlimited = resource.RLIM_INFINITY
        for slot in range(2):
            resource.prlimit(broker.worker_pid(slot), resource.RLIMIT_FSIZE, (unlimited, unlimited))


def full_set(tag: str) -> bytes:
    return encode_message_set([f"{tag}-m{n}".encode().ljust(FULL_SET_PAYLOAD_BYTES, b".")
                               for n in range(FULL_SET_PAYLOADS)])


def assert_segment_files_whole(broker, status) -> None:
    """On disk: contiguous segments of whole, CRC-valid messages, ending at the log end."""
    for entry in status["partitions"]:
        paths = segment_paths(broker, entry["partition"])
        expected_base = 0
        for path in paths:
            assert base_of(path) == expected_base, f"{path}: segments are not contiguous"
            with open(path, "rb") as f:
                data = f.read()
            assert validate_message_set(data).complete, f"{path} holds a partial or corrupt message"
            expected_base += len(data)
        assert expected_base == entry["log_end"], f"{TOPIC}-{entry['partition']}: files end at {expected_base}"


@pytest.mark.parametrize("limit_class", [SmallFilesystem, FileSizeLimit], ids=["tmpfs", "rlimit-fsize"])
def test_full_disk_fails_produces_keeps_the_log_whole_and_recovers_when_space_returns(
        broker_factory, tmpfs, limit_class):
    limit = limit_class(tmpfs)
    broker = broker_factory("full", start=False, log_file_size=limit.segment_bytes)
    limit.before_start(broker)
    broker.start()
    limit.after_start(broker)
    pids = broker.child_pids()
    acked = Acked()

    # Fill it: acknowledged produces (durability append on even partitions, flush on odd)
    # until every partition refused one, each refusal answered at once with error 8.
    refused = {}
    slowest_answer = 0.0
    with WireClient(broker.port, timeout=10) as client:
        for n in range(5000):
            partition = n % PARTITIONS
            message_set = full_set(f"fill-{n}")
            asked = time.monotonic()
            ack = client.produce_acked(TOPIC, partition, message_set, partition % 2)
            slowest_answer = max(slowest_answer, time.monotonic() - asked)
            if ack.error == 0:
                assert partition not in refused, "an append succeeded on a full partition before space was freed"
                acked.record(partition, ack.offset, message_set)
                continue
            assert ack.error == ErrorCode.STORAGE_ERROR, f"full disk answered with error {ack.error}"
            refused[partition] = refused.get(partition, 0) + 1
            if len(refused) == PARTITIONS and min(refused.values()) >= 3:
                break
        else:
            pytest.fail(f"the disk never filled up: {refused}")
    assert slowest_answer < 5, f"an answer took {slowest_answer:.1f}s"

    # Full: no worker restarted, fetches work, the log is whole on disk and serves every
    # acknowledged message; a fire-and-forget produce gets its connection closed.
    status = broker.wait_until(lambda s: all(p["flushed_end"] == p["log_end"] for p in s["partitions"]),
                               what="every appended byte flushed")
    assert broker.child_pids() == pids and all(w["restarts"] == 0 for w in status["workers"])
    assert_segment_files_whole(broker, status)
    assert_served(broker.port, acked)
    with WireClient(broker.port) as client:
        client.produce(TOPIC, 0, [b"y" * FULL_SET_PAYLOAD_BYTES] * FULL_SET_PAYLOADS)
        assert client.closed_by_broker(timeout=5)
    output = broker.output()
    assert "disk full" in output or "File too large" in output
    failure_lines = [line for line in output.splitlines() if f"produce to {TOPIC}-" in line and "refused" in line]
    assert len(failure_lines) <= PARTITIONS + 1, "one log line per failing partition, not one per request"

    # Room again: produces work at once, without a restart, right behind the old end.
    limit.free(broker)
    with WireClient(broker.port) as client:
        for partition in range(PARTITIONS):
            message_set = full_set(f"freed-{partition}")
            ack = client.produce_acked(TOPIC, partition, message_set, 1)
            assert ack.error == 0, f"partition {partition} still refuses after space returned: {ack.error}"
            assert ack.offset == acked.end(partition)
            acked.record(partition, ack.offset, message_set)
    assert broker.child_pids() == pids
    assert "works again after" in broker.output()
    assert_served(broker.port, acked)

    # A restart afterwards recovers cleanly with nothing acknowledged lost.
    broker.kill_tree()
    restart(broker)
    assert "truncating" not in broker.output(), "a partial message had been left on disk"
    assert_served(broker.port, acked)


# --- a failing fdatasync ------------------------------------------------------------------------

FAILING_FDATASYNC_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* fdatasync fails with EIO while the file named by $MPBROKER_TEST_FAIL_FDATASYNC exists. */
int fdatasync(int fd) {
    static int (*real_fdatasync)(int);
    const char *flag = getenv("MPBROKER_TEST_FAIL_FDATASYNC");
    if (flag != NULL && access(flag, F_OK) == 0) {
        errno = EIO;
        return -1;
    }
    if (real_fdatasync == NULL)
        real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real_fdatasync(fd);
}
"""


@pytest.fixture
def failing_fdatasync(tmp_path, monkeypatch):
    """Brokers started from here on fail fdatasync while the returned flag file exists
    (an LD_PRELOAD shim: a disk that reports a write-back error)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the fdatasync shim")
    source = tmp_path / "failing_fdatasync.c"
    source.write_text(FAILING_FDATASYNC_C)
    library = tmp_path / "failing_fdatasync.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O", "-o", str(library), str(source), "-ldl"], check=True)
    flag = tmp_path / "fail-fdatasync"
    monkeypatch.setenv("LD_PRELOAD", str(library))
    monkeypatch.setenv("MPBROKER_TEST_FAIL_FDATASYNC", str(flag))
    return flag


def test_failed_fdatasync_fails_the_flush_acks_and_the_respawned_worker_recovers(broker_factory, failing_fdatasync):
    broker = broker_factory(log_file_size=SEGMENT_BYTES)
    acked = Acked()
    produce(broker.port, acked, "before", sets=8)
    slot = next(p["worker"] for p in broker.status()["partitions"] if p["partition"] == 1)
    victim = broker.worker_pid(slot)

    failing_fdatasync.touch()
    with WireClient(broker.port) as client:
        asked = time.monotonic()
        ack = client.produce_acked(TOPIC, 1, encode_message_set(payloads_for("during")), 1)
        assert time.monotonic() - asked < 5
    assert ack.error == ErrorCode.PARTITION_UNAVAILABLE, "a flush ack must not be given for a failed flush"
    broker.wait_until(lambda s: s["workers"][slot]["last_exit"] == 3, what="the worker exited with code 3")
    assert "stopping without a final flush after a failed fdatasync" in broker.output()

    failing_fdatasync.unlink()
    deadline = time.monotonic() + 15
    with WireClient(broker.port) as client:
        while True:  # PartitionUnavailable while the worker is respawned: retry, as clients do
            message_set = encode_message_set(payloads_for("after"))
            ack = client.produce_acked(TOPIC, 1, message_set, 1)
            if ack.error != ErrorCode.PARTITION_UNAVAILABLE:
                break
            assert time.monotonic() < deadline, "the partition never came back"
            time.sleep(0.05)
    assert ack.error == 0
    status = broker.status()["workers"][slot]
    assert status["restarts"] >= 1 and status["pid"] != victim
    assert "(recovered: " in broker.output().split("stopping without a final flush")[-1]
    # The set whose flush failed was written, so it may be served (at least once); every
    # acknowledged message is there, in order, and the new one right at the end.
    got = served(broker.port, 1)
    assert [m for m in got if m in acked.messages[1]] == acked.messages[1]
    assert got[-MESSAGES_PER_SET:] == acked_messages(ack, message_set)
    broker.kill_tree()
    restart(broker)
    assert served(broker.port, 1) == got


def acked_messages(ack, message_set: bytes) -> list:
    single = Acked()
    single.record(0, ack.offset, message_set)
    return single.messages[0]
