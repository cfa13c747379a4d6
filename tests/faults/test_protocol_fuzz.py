"""A fuzzer for the wire protocol (issue 9), against one real broker process tree.

Hypothesis generates every request type (PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE,
OFFSETS, PRODUCE_ACKED and unknown types) well-formed but hostile: bad topic names,
negative and huge partitions, sizes, counts, offsets and max sizes, lying length and
count fields, message sets with bad CRCs, magic bytes and codecs, truncated
messages, nested compression and compressed sets that inflate far past
``max.inflated.request.bytes``; and raw frames mutated byte by byte. Each example is
one connection: its bytes, then (when they end on a frame boundary) one
acknowledged "barrier" produce per worker, so that everything the example routed has
been handled before it is checked. Checked after every example:

- the broker answers or closes the connection within ``ANSWER_TIMEOUT_S``, and each
  answer is right for its request (error codes; fetched bytes equal the bytes on
  disk; acknowledged sets are on disk where the acknowledgement says);
- the connection is closed exactly when a reference model (the codec's decoder, the
  topic rules, ``validate_message_set``) says a 0.7 broker closes it;
- every byte the example added to any log is explained by message sets the model
  calls valid, in the order they were sent: nothing of an invalid request reaches a
  log, no directory appears for a topic only invalid requests used, and every
  acknowledged or certainly routed set is there;
- no file or directory exists outside ``log.dir``'s partition directories (the whole
  temporary directory is walked), and no path a hostile topic name points at
  (``../x-0`` and the like) exists;

and every ``HEALTH_EVERY_S`` and at the end: the supervisor, its workers and its
acceptor are up with zero restarts, the log has no traceback, and every byte of
every log decodes as CRC-checked messages from offset 0.

A MULTIPRODUCE is judged set by set, as 0.7 handled it: a bad topic or partition
anywhere refuses all of it, but a set that fails validation is not written (and its
connection is closed) while the valid sets beside it are. The last test
fuzzes the acceptor's framing: readers sharing one scratch buffer.

Time: ``MPBROKER_FUZZ_SECONDS`` (default 60) is shared by the three fuzz tests; the
seed is random unless ``MPBROKER_FUZZ_SEED`` is set, and is printed with the number
of examples. A longer run, on demand:

    MPBROKER_FUZZ_SECONDS=1800 python -m pytest tests/faults/test_protocol_fuzz.py -s

A failure shows the example's bytes (hypothesis prints it, shrunk); the broker keeps
its state between examples, so repeat a failure with its seed and the same budget.
"""

import os
import random
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from functools import cache

import pytest
import snappy
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from mpbroker.codec import compression
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.framing import FrameReader, MalformedRequestError
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY
from mpbroker.codec.message_set import decode_messages, validate_message_set
from mpbroker.codec.topic_names import check_topic
from mpbroker.config.broker_config import config_from_properties
from mpbroker.ownership import owner_slot
from mpbroker.segments.naming import parse_partition_dir, parse_segment_file_name
from mpbroker.segments.recovery_points import is_checkpoint_file
from tests.broker.harness import BrokerProcess
from tests.broker.wire import WireClient

FUZZ_SECONDS = float(os.environ.get("MPBROKER_FUZZ_SECONDS", "60"))
FUZZ_SEED = int(os.environ.get("MPBROKER_FUZZ_SEED", random.randrange(1 << 32)))
EXAMPLES_PER_ROUND = 50
ANSWER_TIMEOUT_S = 5.0
HEALTH_EVERY_S = 3.0

NUM_WORKERS = 2
MAX_MESSAGE_SIZE = 100_000
MAX_REQUEST_BYTES = 300_000
MAX_INFLATED_BYTES = 1 << 20
BROKER_SETTINGS = {
    "num_workers": NUM_WORKERS,
    "num_partitions": 4,
    "topic_partition_count_map": "fz.a:2,fz_b-2:6",
    "log_file_size": 2048,  # many segments: fetches meet segment ends
    "max_message_size": MAX_MESSAGE_SIZE,
    "max_socket_request_bytes": MAX_REQUEST_BYTES,
    "max_inflated_request_bytes": MAX_INFLATED_BYTES,
}
CONFIG, _ = config_from_properties({key.replace("_", "."): str(value) for key, value in BROKER_SETTINGS.items()})

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
BARRIER_TOPIC = "fuzz-barrier"
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # reprs of large examples
KNOWN_TYPES = {0, 1, 2, 3, 4, 100}

VALID_TOPICS = (b"fz", b"fz.a", b"fz_b-2", b"Z" * 249)  # 249: the longest legal name
HOSTILE_TOPICS = (
    b"Y" * 250, b"Y" * 255,  # too long for "<topic>-<partition>" to be a file name
    b"", b".", b"..", b"../fz", b"../../../../../escaped", b"a/b", b"/tmp/absolute", b"fz\x00", b"fz\n", b"\x1b[2J",
    b"fz\x7f", b"\xff\xfe", "caf\u00e9".encode(), "\u65e5\u672c".encode(), b"x" * 256, b"fz ", b"fz\\x", b"*", b"fz:1",
)

# --------------------------------------------------------------------------------------
# Wire bytes, built from PROTOCOL.md (not with the codec under test)
# --------------------------------------------------------------------------------------


def frame(request_type: int, body: bytes, size_delta: int = 0) -> bytes:
    size = max(INT32_MIN, min(INT32_MAX, 2 + len(body) + size_delta))
    return INT32.pack(size) + INT16.pack(request_type) + body


def string(raw: bytes) -> bytes:
    return INT16.pack(len(raw)) + raw


def produce_body(topic: bytes, partition: int, message_set: bytes, set_size_delta: int = 0) -> bytes:
    set_size = max(INT32_MIN, min(INT32_MAX, len(message_set) + set_size_delta))
    return string(topic) + struct.pack(">ii", partition, set_size) + message_set


def fetch_body(topic: bytes, partition: int, offset: int, max_size: int) -> bytes:
    return string(topic) + struct.pack(">iqi", partition, offset, max_size)


def message(payload: bytes, magic: int = 1, attributes: int = 0, crc: int | None = None) -> bytes:
    crc = zlib.crc32(payload) if crc is None else crc
    if magic == 0:
        return struct.pack(">iBI", 5 + len(payload), 0, crc) + payload
    return struct.pack(">iBBI", 6 + len(payload), magic, attributes, crc) + payload


@cache
def bombs() -> tuple:
    """Compressed bodies that inflate far past MAX_INFLATED_BYTES: (codec, body)."""
    zeros = bytes(8 << 20)
    gzip_zeros = compression.compress(CODEC_GZIP, zeros)
    nested = compression.compress(CODEC_GZIP, message(gzip_zeros, attributes=CODEC_GZIP) * 4)
    snappy_zeros = compression.compress(CODEC_SNAPPY, bytes(3 << 19))  # fits in MAX_MESSAGE_SIZE
    lying_block = b"\xff\xff\xff\xff\x0f" + b"\x00" * 16  # a raw snappy block declaring 4 GiB
    return (CODEC_GZIP, gzip_zeros), (CODEC_GZIP, nested), (CODEC_SNAPPY, snappy_zeros), (CODEC_SNAPPY, lying_block)


# --------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------

# Every request is drawn either clean (a legal topic and partition, honest lengths,
# valid messages: what a client sends) or hostile (anything goes), half and half, so
# that the valid paths keep being exercised next to the hostile ones.
valid_topics = st.sampled_from(VALID_TOPICS)
topics = st.one_of(valid_topics, st.from_regex(rb"fz[0-9]", fullmatch=True),
                   st.sampled_from(HOSTILE_TOPICS), st.binary(max_size=12))
partitions = st.one_of(st.integers(0, 3), st.just(-1), st.sampled_from([2, 4, 6, 8, -2, INT32_MAX, INT32_MIN]),
                       st.integers(INT32_MIN, INT32_MAX))
offsets = st.one_of(st.integers(0, 4000), st.sampled_from([-1, INT64_MAX, INT64_MIN]),
                    st.integers(INT64_MIN, INT64_MAX))
max_sizes = st.one_of(st.integers(0, 5000), st.sampled_from([-1, 0, INT32_MAX, INT32_MIN]),
                      st.integers(INT32_MIN, INT32_MAX))
times = st.one_of(st.sampled_from([-1, -2, 0, int(time.time() * 1000)]), st.integers(INT64_MIN, INT64_MAX))
max_offset_counts = st.one_of(st.integers(0, 20), st.sampled_from([-1, INT32_MAX, INT32_MIN]),
                              st.integers(INT32_MIN, INT32_MAX))
length_lies = st.sampled_from([0, 0, 0, -1, 1, -6, 6, 1 << 20, INT32_MIN, INT32_MAX])
small_payloads = st.binary(max_size=120)
payloads = st.one_of(small_payloads, small_payloads, small_payloads,
                     st.integers(MAX_MESSAGE_SIZE + 1, MAX_MESSAGE_SIZE + 40).map(lambda n: b"o" * n))
CORRUPTIONS = [None] * 4 + ["crc", "magic", "codec", "length up", "length down", "cut", "reserved bits"]


@st.composite
def messages(draw, hostile: bool, depth: int = 0):
    kinds = ["plain"] * 4 + ["v0", "compressed", "compressed"] + (["bomb", "garbage"] if hostile else [])
    kind = draw(st.sampled_from(kinds)) if depth < 3 else "plain"
    if kind == "plain":
        encoded = message(draw(payloads if hostile else small_payloads))
    elif kind == "v0":
        encoded = message(draw(payloads if hostile else small_payloads), magic=0)
    elif kind == "compressed":
        codec = draw(st.sampled_from(["gzip", "snappy", "raw snappy"]))
        inner = draw(message_sets(hostile, depth + 1, min_count=1))
        if codec == "raw snappy":  # no xerial header: one raw block, as the Java library also reads
            encoded = message(snappy.compress(inner), attributes=CODEC_SNAPPY)
        else:
            code = CODEC_GZIP if codec == "gzip" else CODEC_SNAPPY
            encoded = message(compression.compress(code, inner), attributes=code)
    elif kind == "bomb":
        codec, body = draw(st.sampled_from(bombs()))
        encoded = message(body, attributes=codec)
    else:  # a codec over bytes that are not compressed data
        encoded = message(draw(st.binary(max_size=60)), attributes=draw(st.integers(1, 3)))
    return corrupt(draw, encoded) if hostile else encoded


def corrupt(draw, encoded: bytes) -> bytes:
    corruption = draw(st.sampled_from(CORRUPTIONS))
    data = bytearray(encoded)
    if corruption == "crc":
        data[-1 if len(data) > 10 else 6] ^= 1 << draw(st.integers(0, 7))
    elif corruption == "magic":
        data[4] = draw(st.integers(2, 255))
    elif corruption == "codec" and data[4] == 1:
        data[5] = data[5] | 3
    elif corruption in ("length up", "length down"):
        delta = draw(st.integers(1, 1 << 20)) * (1 if corruption == "length up" else -1)
        INT32.pack_into(data, 0, max(INT32_MIN, INT32.unpack_from(data)[0] + delta))
    elif corruption == "cut":
        del data[-draw(st.integers(1, len(data))):]
    elif corruption == "reserved bits" and data[4] == 1:
        data[5] |= draw(st.integers(1, 63)) << 2  # ignored by 0.7, not covered by the CRC: valid
    return bytes(data)


@st.composite
def message_sets(draw, hostile: bool, depth: int = 0, min_count: int = 0):
    count = draw(st.sampled_from([n for n in (1, 1, 2, 3, 4, 0) if n >= min_count]))
    return b"".join(draw(messages(hostile, depth)) for _ in range(count))


@st.composite
def targets(draw, hostile: bool):
    """``(topic, partition)``: hostile, or legal (partition -1 included)."""
    if hostile:
        return draw(topics), draw(partitions)
    topic = draw(valid_topics)
    return topic, draw(st.integers(-1, CONFIG.partitions_for(topic.decode()) - 1))


@st.composite
def produce_fields(draw, hostile: bool):
    """Arguments of ``produce_body``."""
    topic, partition = draw(targets(hostile))
    return topic, partition, draw(message_sets(hostile)), draw(length_lies) if hostile else 0


@st.composite
def produce_requests(draw):
    hostile = draw(st.booleans())
    return frame(0, produce_body(*draw(produce_fields(hostile))), draw(length_lies) if hostile else 0)


@st.composite
def multiproduce_requests(draw):
    hostile = draw(st.booleans())
    produces = draw(st.lists(produce_fields(hostile), min_size=0 if hostile else 1, max_size=4))
    count = len(produces) + (draw(st.sampled_from([0, 0, 1, -1, 1000, -len(produces) - 1])) if hostile else 0)
    body = INT16.pack(max(-(1 << 15), min((1 << 15) - 1, count))) + b"".join(produce_body(*p) for p in produces)
    return frame(3, body, draw(length_lies) if hostile else 0)


@st.composite
def produce_acked_requests(draw):
    hostile = draw(st.booleans())
    durability = draw(st.integers(-(1 << 15), (1 << 15) - 1) if hostile else st.sampled_from([0, 1]))
    body = INT16.pack(durability) + produce_body(*draw(produce_fields(hostile)))
    return frame(100, body, draw(length_lies) if hostile else 0)


@st.composite
def fetch_fields(draw, hostile: bool):
    """Arguments of ``fetch_body``."""
    topic, partition = draw(targets(hostile))
    if hostile:
        return topic, partition, draw(offsets), draw(max_sizes)
    return topic, max(0, partition), draw(st.integers(0, 4000)), draw(st.integers(0, 5000))


@st.composite
def fetch_requests(draw):
    hostile = draw(st.booleans())
    return frame(1, fetch_body(*draw(fetch_fields(hostile))), draw(length_lies) if hostile else 0)


@st.composite
def multifetch_requests(draw):
    hostile = draw(st.booleans())
    fetches = draw(st.lists(fetch_fields(hostile), max_size=5))
    repeat = draw(st.sampled_from([1, 1, 1, 500, 3000]))  # many partitions in one request
    count = len(fetches) * repeat + (draw(st.sampled_from([0, 0, 1, -1])) if hostile else 0)
    body = INT16.pack(max(-(1 << 15), min((1 << 15) - 1, count))) + b"".join(fetch_body(*f) for f in fetches) * repeat
    return frame(2, body, draw(length_lies) if hostile else 0)


@st.composite
def offsets_requests(draw):
    hostile = draw(st.booleans())
    topic, partition = draw(targets(hostile))
    when, count = (draw(times), draw(max_offset_counts)) if hostile else (draw(st.sampled_from([-1, -2, 0])), 10)
    body = string(topic) + struct.pack(">iqi", max(0, partition) if not hostile else partition, when, count)
    return frame(4, body, draw(length_lies) if hostile else 0)


@st.composite
def unknown_type_requests(draw):
    request_type = draw(st.integers(-(1 << 15), (1 << 15) - 1).filter(lambda t: t not in KNOWN_TYPES))
    return frame(request_type, draw(st.binary(max_size=40)), draw(length_lies))


produce_streams = st.one_of(produce_requests(), multiproduce_requests(), produce_acked_requests())
read_streams = st.one_of(fetch_requests(), multifetch_requests(), offsets_requests(), unknown_type_requests())


@st.composite
def mutated_streams(draw):
    """One to three generated frames, then byte-level mutations."""
    data = bytearray(b"".join(draw(st.lists(st.one_of(produce_streams, read_streams), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(data)))
        mutation = draw(st.sampled_from(["flip", "insert", "delete", "int32", "duplicate", "truncate"]))
        if mutation == "flip" and where < len(data):
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif mutation == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=16))
        elif mutation == "delete":
            del data[where:where + draw(st.integers(1, 16))]
        elif mutation == "int32" and where + 4 <= len(data):
            edge = draw(st.sampled_from([0, 1, -1, INT32_MAX, INT32_MIN, 6, 0x7FFF]))
            INT32.pack_into(data, where, edge)
        elif mutation == "duplicate":
            data[where:where] = data[where:where + draw(st.integers(1, 64))]
        elif mutation == "truncate":
            del data[where:]
    return bytes(data)


# --------------------------------------------------------------------------------------
# The reference model: what a correct broker does with a byte stream
# --------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A valid message set that may (or, if ``required``, must) have been appended to
    one of ``keys`` ((topic, partition) pairs), in send order."""

    data: bytes
    keys: list
    required: bool


@dataclass
class Expectation:
    requests: list  # answering requests, in order
    candidates: list
    closes: bool  # the broker must close the connection
    hostile_topics: set = field(default_factory=set)


def decode_stream(stream: bytes):
    """``(requests, ending)``: the requests a broker decodes from ``stream``, and how it
    ends: "complete" (on a frame boundary), "partial" (inside a frame) or "malformed"."""
    reader = FrameReader(MAX_REQUEST_BYTES, min_frame_bytes=2)  # a request holds at least its type
    reader.feed(stream)
    decoded = []
    while True:
        try:
            body = reader.next_frame()
            if body is None:
                return decoded, "partial" if reader.buffered else "complete"
            decoded.append(rq.decode_request(body))
        except MalformedRequestError:
            return decoded, "malformed"


def topic_ok(topic: str) -> bool:
    try:
        check_topic(topic)
        return True
    except InvalidTopicError:
        return False


def target_keys(topic: str, partition: int):
    """The (topic, partition) pairs a produce may land in, or None if it is refused."""
    if not topic_ok(topic):
        return None
    count = CONFIG.partitions_for(topic)
    if partition == -1:
        return [(topic, p) for p in range(count)]
    return [(topic, partition)] if 0 <= partition < count else None


def set_error(message_set) -> int | None:
    error = validate_message_set(bytes(message_set), MAX_MESSAGE_SIZE, inflate_limit=MAX_INFLATED_BYTES).error
    return None if error is None else int(error.code)


def produce_error(topic: str, message_set) -> int | None:
    """The error a routed produce gets from its worker, or None."""
    return set_error(message_set)


def expect(decoded, ending: str) -> Expectation:
    expectation = Expectation([], [], ending != "complete")
    certain = True  # every request so far was certainly processed, and no close is under way
    for request in decoded:
        if hasattr(request, "topic") and not topic_ok(request.topic):
            expectation.hostile_topics.add(request.topic)
        kind = type(request)
        if kind is rq.ProduceRequest or kind is rq.MultiProduceRequest:
            produces = [request] if kind is rq.ProduceRequest else request.produces
            targets = [target_keys(p.topic, p.partition) for p in produces]
            expectation.hostile_topics.update(p.topic for p in produces if not topic_ok(p.topic))
            if any(keys is None for keys in targets):
                expectation.closes = True  # refused before routing: nothing of it, nothing after it
                return expectation
            errors = [produce_error(p.topic, p.message_set) for p in produces]
            for produce, keys, error in zip(produces, targets, errors):
                if error is None and len(produce.message_set):
                    expectation.candidates.append(Candidate(bytes(produce.message_set), keys, certain))
            if any(error is not None for error in errors):
                expectation.closes = True  # the worker refuses the set and the connection is closed
                certain = False
        elif kind is rq.ProduceAckedRequest:
            keys = target_keys(request.topic, request.partition)
            candidate = None
            if keys is not None and produce_error(request.topic, request.message_set) is None and \
                    len(request.message_set):
                candidate = Candidate(bytes(request.message_set), keys, False)  # required once acknowledged
                expectation.candidates.append(candidate)
            expectation.requests.append((request, candidate))
        elif kind is rq.MultiFetchRequest:
            expectation.hostile_topics.update(f.topic for f in request.fetches if not topic_ok(f.topic))
            expectation.requests.append((request, None))
        else:
            expectation.requests.append((request, None))
    return expectation


# --------------------------------------------------------------------------------------
# What is on disk
# --------------------------------------------------------------------------------------


def partition_logs(log_dir: str) -> dict:
    """``{(topic, partition): [(base, size), ...]}`` for every partition directory."""
    logs = {}
    for entry in os.scandir(log_dir):
        parsed = parse_partition_dir(entry.name)
        if parsed is None or not entry.is_dir(follow_symlinks=False):
            continue
        segments = []
        for name in os.listdir(entry.path):
            base = parse_segment_file_name(name)
            if base is not None:
                segments.append((base, os.path.getsize(os.path.join(entry.path, name))))
        logs[parsed] = sorted(segments)
    return logs


def log_end(segments) -> int:
    return segments[-1][0] + segments[-1][1] if segments else 0


def read_log(log_dir: str, key, segments, start: int, end: int) -> bytes:
    directory = os.path.join(log_dir, f"{key[0]}-{key[1]}")
    parts = []
    for base, size in segments:
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            with open(os.path.join(directory, f"{base:020d}.kafka"), "rb") as file:
                file.seek(lo - base)
                parts.append(file.read(hi - lo))
    return b"".join(parts)


def segment_end(segments, offset: int) -> int:
    for base, size in segments:
        if base <= offset < base + size:
            return base + size
    return offset


def stray_paths(root: str, log_dir: str) -> list:
    """Every path under ``root`` that is neither the broker's own files nor a partition
    directory of segment files under ``log_dir``."""
    broker_dir = os.path.dirname(log_dir)
    allowed_chain = set()
    path = broker_dir
    while len(path) > len(root):
        allowed_chain.add(path)
        path = os.path.dirname(path)
    stray = []
    for directory, subdirs, files in os.walk(root):
        names = [(name, True) for name in subdirs] + [(name, False) for name in files]
        for name, is_dir in names:
            path = os.path.join(directory, name)
            if directory == log_dir:
                ok = (name in (".lock", "mpbroker.sock", ".kafka_cleanshutdown") and not is_dir) or \
                     (is_dir and parse_partition_dir(name) is not None) or \
                     (not is_dir and is_checkpoint_file(name))
            elif os.path.dirname(directory) == log_dir:
                ok = not is_dir and parse_segment_file_name(name) is not None
            elif directory == broker_dir:
                ok = name in ("server.properties", "broker.log") or path == log_dir
            else:
                ok = path in allowed_chain
            if not ok:
                stray.append(path)
    return stray


def escaping_paths(log_dir: str, topics, partitions=range(-1, 8)) -> list:
    """Paths outside ``log_dir`` that partition directories of ``topics`` would have."""
    found = []
    for topic in topics:
        for partition in partitions:
            path = os.path.normpath(os.path.join(os.fsencode(log_dir), topic.encode("latin-1") + b"-%d" % partition))
            inside = os.path.dirname(path) == os.fsencode(log_dir)
            if not inside and os.path.lexists(path):
                found.append(path)
    return found


def assert_logs_decode(log_dir: str) -> int:
    """Every segment of every log holds whole, CRC-checked messages; segments are
    contiguous from offset 0. Returns the bytes checked."""
    checked = 0
    for key, segments in partition_logs(log_dir).items():
        expected_base = 0
        for base, size in segments:
            assert base == expected_base, f"{key}: segment {base} does not start where the last ended ({expected_base})"
            data = read_log(log_dir, key, [(base, size)], base, base + size)
            _, _, consumed = decode_messages(data, base)
            assert consumed == size, f"{key}: segment {base} ends in {size - consumed} bytes of a partial message"
            expected_base = base + size
            checked += size
        # an empty set creates a partition's log as in 0.7 (how a client creates a topic): then
        # one empty first segment, nothing else
        assert log_end(segments) > 0 or segments == [(0, 0)], f"{key}: a partition directory without a log: {segments}"
    return checked


def assert_broker_healthy(broker: BrokerProcess) -> None:
    assert broker.process.poll() is None, f"the supervisor exited:\n{broker.output()[-5000:]}"
    status = broker.status()
    for child in status["workers"] + [status["acceptor"]]:
        assert child["state"] == "up" and child["restarts"] == 0, f"{child}\n{broker.output()[-5000:]}"
        os.kill(child["pid"], 0)
    output = broker.output()
    assert "Traceback" not in output and "unexpected error" not in output, output[-5000:]


# --------------------------------------------------------------------------------------
# Running examples against the broker
# --------------------------------------------------------------------------------------


class FuzzSession:
    def __init__(self, broker: BrokerProcess, root: str):
        self.broker = broker
        self.root = root
        self.log_dir = broker.log_dir
        self.verified = {}  # (topic, partition) -> log end explained so far
        self.examples = 0
        self.writing_examples = 0  # examples that appended a set (not counting the barrier)
        self.closes = 0
        self.barrier_number = 0
        self.barrier_partitions = sorted({next(p for p in range(4) if owner_slot(BARRIER_TOPIC, p, NUM_WORKERS) == s)
                                          for s in range(NUM_WORKERS)})
        self.next_health = 0.0

    def barrier(self) -> list:
        """One acknowledged produce per worker: ``[(partition, set bytes, frame)]``."""
        sets = []
        for partition in self.barrier_partitions:
            self.barrier_number += 1
            data = message(b"barrier %d" % self.barrier_number)
            sets.append((partition, data, frame(100, INT16.pack(0) + produce_body(BARRIER_TOPIC.encode(), partition,
                                                                                  data))))
        return sets

    def run(self, stream: bytes) -> None:
        decoded, ending = decode_stream(stream)
        try:
            self._run(stream, decoded, ending)
        except BaseException:
            self._resync()  # so that the examples hypothesis runs while shrinking start from a known state
            raise
        self.examples += 1
        if time.monotonic() >= self.next_health:
            self.health_check()

    def _resync(self) -> None:
        try:
            self._exchange(b"".join(b[2] for b in self.barrier()), "complete", False, len(self.barrier_partitions))
        finally:
            self.verified = {key: log_end(segments) for key, segments in partition_logs(self.log_dir).items()}

    def _run(self, stream: bytes, decoded, ending: str) -> None:
        expectation = expect(decoded, ending)
        barrier = self.barrier() if ending == "complete" else []
        answers, closed = self._exchange(stream + b"".join(b[2] for b in barrier), ending, expectation.closes,
                                         len(expectation.requests) + len(barrier))
        assert closed == expectation.closes, (
            f"connection {'closed' if closed else 'left open'}; the model says it "
            f"{'closes' if expectation.closes else 'stays open'} ({len(answers)} answers; {decoded!r:.2000})")
        barrier_candidates = [Candidate(data, [(BARRIER_TOPIC, p)], False) for p, data, _ in barrier]
        if closed:  # a fresh connection's barrier, after everything the first one routed
            self.closes += 1
            second = self.barrier()
            acks, _ = self._exchange(b"".join(b[2] for b in second), "complete", False, len(second))
            barrier_candidates += [Candidate(data, [(BARRIER_TOPIC, p)], True) for p, data, _ in second]
            assert [rs.decode_produce_ack(ack).error for ack in acks] == [0] * len(second)
        logs = partition_logs(self.log_dir)
        self._check_answers(expectation, answers[:len(expectation.requests)], logs)
        self._explain_new_bytes(expectation.candidates + barrier_candidates, logs)
        self._check_paths(expectation.hostile_topics)

    def _exchange(self, data: bytes, ending: str, closes: bool, expected_answers: int):
        """Send ``data``; ``(answer bodies, closed by the broker)``. Reads until the
        broker closes when ``closes``, else ``expected_answers`` answers."""
        answers = []
        with WireClient(self.broker.port, timeout=ANSWER_TIMEOUT_S) as client:
            try:
                client.send(data)
                if ending == "partial":
                    client.sock.shutdown(socket.SHUT_WR)  # the broker sees the end of the stream
                while closes or len(answers) < expected_answers:
                    answers.append(client.receive())
            except TimeoutError:
                raise AssertionError(f"neither {expected_answers} answers nor a close within {ANSWER_TIMEOUT_S}s "
                                     f"({len(answers)} answers)") from None
            except OSError:  # closed (or reset) by the broker
                return answers, True
        return answers, False

    def _check_answers(self, expectation, answers, logs) -> None:
        reads = {}  # (key, start, end) -> bytes: a MULTIFETCH may ask for the same bytes thousands of times

        def stored(key, segments, start, end):
            if (key, start, end) not in reads:
                reads[(key, start, end)] = read_log(self.log_dir, key, segments, start, end)
            return reads[(key, start, end)]

        for (request, candidate), answer in zip(expectation.requests, answers):
            kind = type(request)
            if kind is rq.FetchRequest:
                error, data = rs.split_error(answer)
                self._check_fetch(request, error, bytes(data), logs, stored)
            elif kind is rq.MultiFetchRequest:
                parts = rs.decode_multifetch(answer)
                assert len(parts) == len(request.fetches)
                for fetch, (error, data) in zip(request.fetches, parts):
                    self._check_fetch(fetch, error, bytes(data), logs, stored)
            elif kind is rq.OffsetsRequest:
                self._check_offsets(request, *rs.decode_offsets(answer), logs)
            else:
                self._check_ack(request, candidate, rs.decode_produce_ack(answer), logs)

    def _check_fetch(self, request, error, data, logs, stored) -> None:
        where = f"{request!r:.300} answered {error}, {len(data)} bytes"
        key = (request.topic, request.partition)
        segments = logs.get(key)
        if not 0 <= request.partition < CONFIG.partitions_for(request.topic):
            assert (error, data) == (3, b""), where
        elif request.max_size < 0:
            assert (error, data) == (4, b""), where
        elif key in self.verified and not 0 <= request.offset <= log_end(segments):
            assert (error, data) == (1, b""), where
        elif (error, data) != (0, b""):  # empty: an unknown partition, or at (or not yet past) the flushed end
            assert segments is not None, f"{where}: data or an error from a partition without a log"
            assert error in (0, 1) and not (error == 1 and (data or request.offset == 0)), where
            end = request.offset + len(data)
            assert len(data) <= request.max_size and end <= segment_end(segments, request.offset), where
            assert data == stored(key, segments, request.offset, end), where

    def _check_offsets(self, request, error, answer, logs) -> None:
        where = f"{request!r:.300} answered {error}, {answer}"
        if not 0 <= request.partition < CONFIG.partitions_for(request.topic):
            assert (error, answer) == (3, []), where
            return
        assert error == 0, where
        segments = logs.get((request.topic, request.partition))
        bases = {base for base, _ in segments or []}
        no_log_answer = [0] if request.time in (-1, -2) else []
        if request.max_offsets <= 0:
            assert answer == [], where
        elif segments is None or (request.topic, request.partition) not in self.verified and answer == no_log_answer:
            assert answer == no_log_answer, where
        else:
            assert len(answer) <= request.max_offsets and answer == sorted(answer, reverse=True), where
            assert all(0 <= offset <= log_end(segments) for offset in answer), where
            assert all(offset in bases for offset in answer[1:]), where
            if request.time == -2:
                assert answer == [0], where

    def _check_ack(self, request, candidate, ack, logs) -> None:
        where = f"{request!r:.300} answered {ack}"
        keys = target_keys(request.topic, request.partition)
        if not topic_ok(request.topic):
            assert ack.error == 6, where
        elif keys is None:
            assert ack.error == 3, where
        elif produce_error(request.topic, request.message_set) is not None:
            assert ack.error == produce_error(request.topic, request.message_set), where
        else:
            assert ack.error == 0 and ack.next_offset - ack.offset == len(request.message_set), where
            assert (request.topic, ack.partition) in keys, where
            if candidate is not None:
                candidate.required = True
                candidate.keys = [(request.topic, ack.partition)]
                segments = logs[(request.topic, ack.partition)]
                stored = read_log(self.log_dir, candidate.keys[0], segments, ack.offset, ack.next_offset)
                assert stored == candidate.data, f"{where}: the log holds other bytes there"

    def _explain_new_bytes(self, candidates, logs) -> None:
        """The bytes every log gained are the valid sets sent, in send order; the
        required ones all there, nothing else."""
        regions = {}
        for key, segments in logs.items():
            end = log_end(segments)
            assert end > 0 or segments == [(0, 0)], f"partition directory {key} without a log: {segments}"
            start = self.verified.get(key, 0)
            if end > start:
                regions[key] = read_log(self.log_dir, key, segments, start, end)
        positions = dict.fromkeys(regions, 0)

        def place(index: int) -> bool:
            if index == len(candidates):
                return all(positions[key] == len(region) for key, region in regions.items())
            candidate = candidates[index]
            for key in candidate.keys:
                region = regions.get(key)
                if region is not None and region.startswith(candidate.data, positions[key]):
                    positions[key] += len(candidate.data)
                    if place(index + 1):
                        return True
                    positions[key] -= len(candidate.data)
            return not candidate.required and place(index + 1)

        assert place(0), (f"the logs' new bytes are not the valid sets sent: new bytes "
                          f"{ {key: region[:200] for key, region in regions.items()} }, sets {candidates!r:.3000}")
        if any(key[0] != BARRIER_TOPIC for key in regions):
            self.writing_examples += 1
        for key, segments in logs.items():
            self.verified[key] = log_end(segments)

    def _check_paths(self, hostile_topics) -> None:
        assert stray_paths(self.root, self.log_dir) == []
        assert escaping_paths(self.log_dir, hostile_topics) == []

    def health_check(self) -> None:
        assert_broker_healthy(self.broker)
        assert_logs_decode(self.log_dir)
        self.next_health = time.monotonic() + HEALTH_EVERY_S

    def seed_logs(self) -> None:
        """Some data in the valid topics, over several segments, for fetches to find."""
        rng = random.Random(7)
        with WireClient(self.broker.port) as client:
            for topic in VALID_TOPICS:
                name = topic.decode()
                for partition in range(CONFIG.partitions_for(name)):
                    for _ in range(3):
                        data = b"".join(message(rng.randbytes(rng.randrange(200))) for _ in range(rng.randrange(1, 9)))
                        assert client.produce_acked(name, partition, data, durability=1).error == 0
        for key, segments in partition_logs(self.log_dir).items():
            self.verified[key] = log_end(segments)


@pytest.fixture(scope="module")
def fuzz_session(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    broker = BrokerProcess(root / "a" / "b" / "broker", **BROKER_SETTINGS)
    try:
        broker.start()
        session = FuzzSession(broker, str(root))
        session.seed_logs()
        yield session
        session.health_check()
        assert broker.stop() == 0, broker.output()[-5000:]
    finally:
        broker.close()


def fuzz(session: FuzzSession, strategy, seconds: float, capsys, name: str) -> None:
    """Run examples of ``strategy`` for ``seconds``: rounds of EXAMPLES_PER_ROUND with
    successive seeds."""
    with capsys.disabled():  # before anything runs, so that a hang or a crash can be replayed
        print(f"\n{name}: fuzzing for {seconds:.0f}s with MPBROKER_FUZZ_SEED={FUZZ_SEED}", flush=True)
    deadline = time.monotonic() + seconds
    first = session.examples

    @settings(max_examples=EXAMPLES_PER_ROUND, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(stream=strategy)
    def one_example(stream):
        if time.monotonic() < deadline:
            session.run(stream)

    round_number = 0
    while time.monotonic() < deadline:
        seed(FUZZ_SEED + zlib.crc32(name.encode()) + round_number)(one_example)
        one_example()
        round_number += 1
    session.health_check()
    with capsys.disabled():
        print(f"\n{name}: {session.examples - first} examples in {seconds:.0f}s (seed {FUZZ_SEED}; so far: "
              f"{session.writing_examples} wrote to a log, {session.closes} had their connection closed)")
    assert session.examples > first


def test_fuzz_produce_requests(fuzz_session, capsys):
    fuzz(fuzz_session, produce_streams, FUZZ_SECONDS / 3, capsys, "produce, multiproduce, produce_acked")


def test_fuzz_read_and_unknown_requests(fuzz_session, capsys):
    fuzz(fuzz_session, read_streams, FUZZ_SECONDS / 3, capsys, "fetch, multifetch, offsets, unknown types")


def test_fuzz_mutated_frames(fuzz_session, capsys):
    fuzz(fuzz_session, mutated_streams(), FUZZ_SECONDS / 3, capsys, "mutated frames")


# --------------------------------------------------------------------------------------
# The framing under the acceptor: readers sharing one scratch buffer
# --------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(st.lists(st.binary(min_size=1, max_size=3000), max_size=8), min_size=2, max_size=3),
       data=st.data())
def test_readers_sharing_a_scratch_buffer_cut_their_own_frames(bodies, data):
    scratch = bytearray(4096)
    readers = [FrameReader(5000, chunk_bytes=4096, scratch=scratch) for _ in bodies]
    streams = [b"".join(INT32.pack(len(body)) + body for body in stream) for stream in bodies]
    sent = [0] * len(streams)
    received = [[] for _ in streams]
    while any(sent[i] < len(streams[i]) for i in range(len(streams))):
        i = data.draw(st.sampled_from([i for i in range(len(streams)) if sent[i] < len(streams[i])]))
        view = readers[i].receive_buffer()
        count = min(len(view), data.draw(st.integers(1, 5000)), len(streams[i]) - sent[i])
        view[:count] = streams[i][sent[i]:sent[i] + count]
        del view
        readers[i].commit(count)
        sent[i] += count
        for _ in range(data.draw(st.integers(0, 3))):  # a paused connection leaves whole frames pending
            body = readers[i].next_frame()
            if body is None:
                break
            received[i].append(body)
        readers[i].detach()
    for i, reader in enumerate(readers):
        while (body := reader.next_frame()) is not None:
            received[i].append(body)
        assert received[i] == bodies[i] and reader.buffered == 0
