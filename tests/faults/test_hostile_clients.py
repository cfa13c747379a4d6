"""Hostile and careless clients against a real broker (issue 9): each test states the
guarantee it checks.

- a consumer that stops reading in the middle of a large answer, and one that reads
  slowly, do not slow the others; one that pipelines requests and never reads is no
  longer read (``max.queued.responses``) and costs bounded memory;
- connections that send nothing, or half a frame, or stop reading, are closed after
  ``connections.max.idle.ms``, unless the broker itself keeps them waiting;
- thousands of idle connections cost little memory and do not slow the others;
  ``max.connections`` refuses beyond its limit, and running out of file descriptors
  pauses accepting instead of spinning (slow senders, ``max.connections.per.ip`` and
  resets: ``test_connection_limits.py``);
- hostile topic names, negative and huge numbers, oversized messages and
  decompression bombs get the 0.7 answer (an error code, or the connection closed),
  nothing is written, memory stays bounded and the broker stays up;
- the control socket is reachable only by the broker's user, or by the group
  ``control.socket.group`` names.

Memory is read from /proc/<pid>/status (VmRSS now, VmHWM the peak).
"""

import grp
import os
import resource
import select
import socket
import stat
import struct
import tempfile
import threading
import time
import zlib

import pytest

from mpbroker.codec import compression
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from mpbroker.control_client import call
from mpbroker.ownership import owner_slot
from mpbroker.testing.process_cpu import cpu_seconds
from tests.broker.wire import WireClient

from .test_protocol_fuzz import (
    INT16,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    assert_broker_healthy,
    escaping_paths,
    fetch_body,
    frame,
    produce_body,
    stray_paths,
    string,
)

PROMPT_S = 1.0  # what "served promptly" means here, per request


def memory_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def acceptor_pid(broker) -> int:
    return broker.status()["acceptor"]["pid"]


def slowest_answer(client: WireClient, rounds: int = 20) -> float:
    """A bystander's rounds of an acknowledged produce and a fetch; the seconds of the
    slowest of its requests."""
    slowest = 0.0
    for number in range(rounds):
        data = encode_message_set([b"bystander %d" % number])
        started = time.monotonic()
        ack = client.produce_acked("bystander", 0, data, durability=0)
        middle = time.monotonic()
        assert ack.error == 0
        assert client.fetch("bystander", 0, 0, 1024)[0] == 0
        slowest = max(slowest, middle - started, time.monotonic() - middle)
    return slowest


def served_promptly(port: int) -> bool:
    with WireClient(port, timeout=10) as client:
        return slowest_answer(client) < PROMPT_S


def raw_socket(port: int, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer:  # before connecting, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    return sock


def readable(socks, seconds: float) -> list:
    """The sockets of ``socks`` that become readable within ``seconds`` (poll: any fd number)."""
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in poller.poll(max(0, seconds) * 1000)]


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the broker closes ``sock`` within ``seconds`` (data that arrives is skipped)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if not readable([sock], left):
            return False
        try:
            if not sock.recv(1 << 16):
                return True
        except ConnectionResetError:
            return True
    return False


def fill_partition(port: int, topic: str, megabytes: int) -> bytes:
    """Acknowledged (flushed) 1 MB sets; returns the bytes of the log."""
    sets = [encode_message_set([bytes([65 + (i % 26)]) * 1000] * 1000) for i in range(megabytes)]
    with WireClient(port) as client:
        for message_set in sets:
            assert client.produce_acked(topic, 0, message_set, durability=1).error == 0
    return b"".join(sets)


# --------------------------------------------------------------------------------------
# Slow, stuck and greedy readers
# --------------------------------------------------------------------------------------


def test_stuck_and_slow_consumers_do_not_slow_other_clients(broker):
    log = fill_partition(broker.port, "big", 10)
    acceptor = acceptor_pid(broker)
    memory_before = memory_kb(acceptor)
    stuck = raw_socket(broker.port, receive_buffer=4096)
    stuck.sendall(rq.encode_fetch("big", 0, 0, 10 << 20))
    assert len(stuck.recv(1024)) > 0  # it read 1 KB of a 10 MB answer and will never read again
    slow = raw_socket(broker.port, receive_buffer=4096)
    slow.sendall(rq.encode_fetch("big", 0, 0, 10 << 20))
    received = bytearray()
    stop = threading.Event()

    def read_slowly():
        while not stop.wait(0.005) and len(received) < 6 + len(log):
            received.extend(slow.recv(4096))

    reader = threading.Thread(target=read_slowly)
    reader.start()
    try:
        with WireClient(broker.port, timeout=10) as bystander:
            deadline = time.monotonic() + 10
            while len(received) < 1_000_000:  # while the slow consumer is at its first megabyte
                assert slowest_answer(bystander, rounds=5) < PROMPT_S
                assert time.monotonic() < deadline, f"the slow consumer got only {len(received)} bytes in 10 s"
    finally:
        stop.set()
        reader.join()
    assert bytes(received[:6]) == struct.pack(">ih", 2 + len(log), 0) and bytes(received[6:]) == log[:len(received) - 6]
    assert memory_kb(acceptor) - memory_before < 10_000, "fetch answers are sent from the files, not buffered"
    stuck.close()
    slow.close()
    assert_broker_healthy(broker)


def test_a_client_that_pipelines_requests_and_never_reads_is_held_back(broker):
    topic = "g" * 240  # long requests: fewer of them fill the kernel's socket buffers
    request = rq.encode_fetch(topic, 0, 0, 1 << 20)
    with WireClient(broker.port) as client:
        assert client.produce_acked(topic, 0, encode_message_set([b"x" * 90])).error == 0
        expected_answer = client.request(request)
    acceptor = acceptor_pid(broker)
    memory_before = memory_kb(acceptor)
    with WireClient(broker.port, timeout=1.0) as greedy:
        batch = request * 1000
        sent = 0
        deadline = time.monotonic() + 8
        try:
            while time.monotonic() < deadline:
                sent += greedy.sock.send(batch[sent % len(batch):])
            raise AssertionError(f"the broker read {sent // len(request)} pipelined requests and kept reading")
        except TimeoutError:
            pass  # nothing more fits: the broker stopped reading
        assert memory_kb(acceptor) - memory_before < 20_000, "queued answers grew without bound"
        assert served_promptly(broker.port)
        # Once it reads, it gets every answer, in order, and the connection goes on.
        complete, partial = divmod(sent, len(request))
        greedy.sock.settimeout(10)
        for number in range(complete):
            assert greedy.receive() == expected_answer, f"answer {number} of {complete}"
        assert greedy.request(request[partial:]) == expected_answer  # the rest of the last one, or one more
    assert_broker_healthy(broker)


def test_a_bad_frame_behind_held_back_requests_closes_only_its_connection(broker):
    request = rq.encode_fetch("t", 0, 0, 100)
    with WireClient(broker.port) as client:
        client.send(request * 1500 + struct.pack(">i", -1))  # held back after 1000, then a bad size
        answers = 0
        with pytest.raises(ConnectionError):
            while True:
                assert client.receive() == struct.pack(">h", 0)
                answers += 1
        assert answers >= 1000  # the rest may be dropped with the connection
    assert served_promptly(broker.port)
    assert_broker_healthy(broker)


# --------------------------------------------------------------------------------------
# Idle connections
# --------------------------------------------------------------------------------------


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory):
    broker = broker_factory(connections_max_idle_ms=500)
    fill_partition(broker.port, "big", 2)
    silent = raw_socket(broker.port)
    half = raw_socket(broker.port)
    half.sendall(struct.pack(">i", 100) + b"\x00\x01")  # 6 bytes of a 104-byte frame
    stuck = raw_socket(broker.port, receive_buffer=4096)
    stuck.sendall(rq.encode_fetch("big", 0, 0, 2 << 20))  # a 2 MB answer it never reads
    started = time.monotonic()
    for sock in (silent, half, stuck):
        assert not closed_within(sock, 0.3 - (time.monotonic() - started)), "closed before the idle timeout"
    with WireClient(broker.port) as active:  # one request every 100 ms: never idle for 500 ms
        while time.monotonic() - started < 2.0:
            assert active.fetch("big", 0, 0, 100)[0] == 0
            assert not closed_within(active.sock, 0.1)
        for sock in (silent, half, stuck):
            assert closed_within(sock, 0.1), "an idle connection outlived connections.max.idle.ms by 1.5 s"
        assert active.fetch("big", 0, 0, 100)[0] == 0
    assert "idle for more than 500 ms (connections.max.idle.ms)" in broker.output()


def test_a_connection_the_broker_keeps_waiting_is_not_idle(broker_factory):
    broker = broker_factory(connections_max_idle_ms=300)
    worker = broker.worker_pid(owner_slot("waits", 0, 2))
    with WireClient(broker.port, timeout=10) as client:
        os.kill(worker, 19)  # SIGSTOP: the acknowledgement cannot come
        try:
            client.send(rq.encode_produce_acked(0, "waits", 0, encode_message_set([b"w"])))
            assert not closed_within(client.sock, 1.2), "closed while waiting for the broker's own worker"
        finally:
            os.kill(worker, 18)  # SIGCONT
        assert rs.decode_produce_ack(client.receive()).error == 0
        assert closed_within(client.sock, 2.0), "idle after its answer, but never closed"


# --------------------------------------------------------------------------------------
# Many connections
# --------------------------------------------------------------------------------------


@pytest.fixture
def many_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_thousands_of_idle_connections(broker_factory, many_files):
    idle_count = min(3000, many_files // 2 - 200)
    if idle_count < 1000:
        pytest.skip(f"RLIMIT_NOFILE hard limit {many_files} is too low for thousands of connections")
    limit = idle_count + 10
    broker = broker_factory(max_connections=limit, max_connections_per_ip=limit)  # all from 127.0.0.1
    acceptor = acceptor_pid(broker)
    memory_before = memory_kb(acceptor)
    idle = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(idle_count)]
    try:
        with WireClient(broker.port, timeout=10) as bystander:  # accepted after every idle one
            assert slowest_answer(bystander) < PROMPT_S
            growth_kb = memory_kb(acceptor) - memory_before
            assert growth_kb < 5 * idle_count + 10_000, f"{growth_kb} KB for {idle_count} idle connections"
            extra = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(20)]
            refused = []
            deadline = time.monotonic() + 5
            while len(refused) < 11 and time.monotonic() < deadline:
                refused += readable([s for s in extra if s not in refused], 0.1)  # closed: nothing was sent
            assert len(refused) == 11, f"{len(refused)} of 20 connections refused, 11 are over the limit"
            assert not readable([s for s in extra if s not in refused], 0.3)
            assert bystander.fetch("bystander", 0, 0)[0] == 0
            for sock in extra:
                sock.close()
    finally:
        for sock in idle:
            sock.close()
    assert f"max.connections ({limit}) reached" in broker.output()
    assert_broker_healthy(broker)


def test_running_out_of_file_descriptors_pauses_accepting_without_spinning(broker):
    acceptor = acceptor_pid(broker)
    open_files = len(os.listdir(f"/proc/{acceptor}/fd"))
    resource.prlimit(acceptor, resource.RLIMIT_NOFILE, (open_files + 20, open_files + 20))
    clients = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(60)]
    try:
        deadline = time.monotonic() + 5
        while "Too many open files" not in broker.output():
            assert time.monotonic() < deadline, "the acceptor never ran out of file descriptors"
            time.sleep(0.05)
        cpu_before = cpu_seconds(acceptor)
        time.sleep(1.0)  # a measuring window, not a wait for a condition
        assert cpu_seconds(acceptor) - cpu_before < 0.3, "the acceptor spins on a listener it cannot accept from"
    finally:
        for sock in clients:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the waiting connections are accepted (and found closed), then a new one is served
        try:
            with WireClient(broker.port, timeout=2) as client:
                assert client.fetch("t", 0, 0) == (0, b"")
            break
        except OSError:
            assert time.monotonic() < deadline, "no connection was served after file descriptors came free"
    assert_broker_healthy(broker)


# --------------------------------------------------------------------------------------
# Hostile input
# --------------------------------------------------------------------------------------

HOSTILE_TOPIC_NAMES = [
    b"../evil", b"..", b".", b"", b"a/b", b"/tmp/absolute", b"../../../../../../tmp/escaped", b"x" * 256,
    b"tab\tbed", b"nul\x00byte", b"new\nline", b"\x1b[31mred", b"back\\slash", b"caf\xe9", "caf\u00e9".encode(),
    "\u65e5\u672c".encode(), b"fz ", b"*",
]


def test_hostile_topic_names_get_refused_by_every_request_type(broker, tmp_path):
    good = encode_message_set([b"x"])
    for topic in HOSTILE_TOPIC_NAMES:
        with WireClient(broker.port) as client:
            ack = rs.decode_produce_ack(client.request(frame(100, INT16.pack(1) + produce_body(topic, 0, good))))
            assert ack.error == 6, topic
            error, data = rs.split_error(client.request(frame(1, fetch_body(topic, 0, 0, 1000))))
            assert (error, bytes(data)) == (0, b""), topic
            assert rs.decode_offsets(client.request(frame(4, string(topic) + struct.pack(">iqi", 0, -1, 5)))) == \
                (0, [0])
            multifetch = client.request(frame(2, INT16.pack(2) + fetch_body(topic, 0, 0, 100) * 2))
            assert [(e, bytes(d)) for e, d in rs.decode_multifetch(multifetch)] == [(0, b""), (0, b"")]
        for request in (frame(0, produce_body(topic, 0, good)),
                        frame(3, INT16.pack(2) + produce_body(b"fine", 0, good) + produce_body(topic, 1, good))):
            with WireClient(broker.port) as client:
                client.send(request)
                assert client.closed_by_broker(), topic
    assert stray_paths(str(tmp_path), broker.log_dir) == []
    assert escaping_paths(broker.log_dir, [t.decode("latin-1") for t in HOSTILE_TOPIC_NAMES]) == []
    assert not os.path.exists(os.path.join(broker.log_dir, "fine-0")), "half of a refused MULTIPRODUCE was written"
    assert_broker_healthy(broker)


def test_topic_names_too_long_for_a_directory_are_invalid_and_nothing_is_written(broker, tmp_path):
    for length in (250, 254, 255):  # "<topic>-<partition>" must fit in a 255-byte file name
        with WireClient(broker.port) as client:
            ack = client.produce_acked("Y" * length, 0, encode_message_set([b"x"]))
            assert ack.error == ErrorCode.INVALID_TOPIC and ack.offset == -1, ack
    assert stray_paths(str(tmp_path), broker.log_dir) == []
    assert_broker_healthy(broker)


def multifetch_frame(fetches) -> bytes:
    return frame(2, INT16.pack(len(fetches)) + b"".join(fetch_body(*fetch) for fetch in fetches))


def test_negative_and_huge_numbers(broker):
    data = encode_message_set([b"n" * 50])
    with WireClient(broker.port) as client:
        assert client.produce_acked("num", 0, data).error == 0
        end = len(data)
        answers = {
            "offset INT64_MAX": (frame(1, fetch_body(b"num", 0, INT64_MAX, 100)), (1, b"")),
            "offset INT64_MIN": (frame(1, fetch_body(b"num", 0, INT64_MIN, 100)), (1, b"")),
            "offset -1": (frame(1, fetch_body(b"num", 0, -1, 100)), (1, b"")),
            "max_size INT32_MIN": (frame(1, fetch_body(b"num", 0, 0, INT32_MIN)), (4, b"")),
            "max_size INT32_MAX": (frame(1, fetch_body(b"num", 0, 0, INT32_MAX)), (0, data)),
            "partition INT32_MAX": (frame(1, fetch_body(b"num", INT32_MAX, 0, 100)), (3, b"")),
            "partition INT32_MIN": (frame(1, fetch_body(b"num", INT32_MIN, 0, 100)), (3, b"")),
        }
        for name, (request, expected) in answers.items():
            error, payload = rs.split_error(client.request(request))
            assert (error, bytes(payload)) == expected, name
        offsets = {
            (-1, 1): (0, [end]), (-1, INT32_MAX): (0, [end, 0]), (-2, INT32_MAX): (0, [0]), (INT64_MIN, 10): (0, []),
            (INT64_MAX, INT32_MAX): (0, [end, 0]), (-1, INT32_MIN): (0, []), (-1, 0): (0, []),
        }
        for (when, count), expected in offsets.items():
            body = string(b"num") + struct.pack(">iqi", 0, when, count)
            assert rs.decode_offsets(client.request(frame(4, body))) == expected, (when, count)
        for partition in (INT32_MAX, INT32_MIN, -2):
            acked_produce = frame(100, INT16.pack(0) + produce_body(b"num", partition, data))
            assert rs.decode_produce_ack(client.request(acked_produce)).error == 3, partition
        everything = [(b"num", 0, 0, INT32_MAX)] * 32767  # the most parts a MULTIFETCH can have
        parts = rs.decode_multifetch(client.request(multifetch_frame(everything)))
        assert len(parts) == 32767 and all((e, bytes(d)) == (0, data) for e, d in parts)
    closing = {
        "set size -1": frame(0, string(b"num") + struct.pack(">ii", 0, -1) + data),
        "set size INT32_MAX": frame(0, string(b"num") + struct.pack(">ii", 0, INT32_MAX) + data),
        "produce to partition INT32_MAX": frame(0, produce_body(b"num", INT32_MAX, data)),
        "null topic": frame(1, INT16.pack(-1) + struct.pack(">iqi", 0, 0, 100)),
        "multifetch count -1": frame(2, INT16.pack(-1) + fetch_body(b"num", 0, 0, 100)),
        "multifetch count 32767, one fetch": frame(2, INT16.pack(32767) + fetch_body(b"num", 0, 0, 100)),
        "multiproduce count 32767, one set": frame(3, INT16.pack(32767) + produce_body(b"num", 0, data)),
        "frame size INT32_MAX": struct.pack(">i", INT32_MAX) + b"\x00\x00",
        "frame size INT32_MIN": struct.pack(">i", INT32_MIN),
        "one-byte frame": struct.pack(">i", 1) + b"\x00",
    }
    for name, request in closing.items():
        with WireClient(broker.port) as client:
            client.send(request)
            assert client.closed_by_broker(), name
    with WireClient(broker.port) as client:
        assert client.fetch("num", 0, 0) == (0, data)  # nothing else was written
    assert_broker_healthy(broker)


def test_a_multifetch_answer_over_2_gib_is_shortened_not_fatal(broker):
    fill_partition(broker.port, "big", 10)  # 10,100,000 bytes in one segment
    part_bytes = 10_100_000
    parts = 215  # 2,171,500,000 bytes asked for: over the 2 GiB an int32 size can say
    with WireClient(broker.port, timeout=30) as client:
        client.send(multifetch_frame([(b"big", 0, 0, INT32_MAX)] * parts))
        sock = client.sock
        buffer = bytearray(1 << 20)

        def read_exactly(count: int) -> bytes:
            data = b""
            while len(data) < count:
                chunk = sock.recv(count - len(data))
                assert chunk, "closed in the middle of the answer"
                data += chunk
            return data

        def skip(count: int) -> None:
            while count:
                received = sock.recv_into(buffer, min(count, len(buffer)))
                assert received, "closed in the middle of the answer"
                count -= received

        total, error = struct.unpack(">ih", read_exactly(6))
        assert error == 0 and total <= INT32_MAX
        lengths = []
        for _ in range(parts):
            size, part_error = struct.unpack(">ih", read_exactly(6))
            assert part_error == 0
            lengths.append(size - 2)
            skip(size - 2)
        assert 2 + sum(6 + length for length in lengths) == total
        full = (INT32_MAX - 2 - 6 * parts) // part_bytes
        assert lengths[:full] == [part_bytes] * full and 0 < lengths[full] < part_bytes
        assert lengths[full + 1:] == [0] * (parts - full - 1)
        assert client.fetch("big", 0, 0, 10)[0] == 0  # the connection goes on
    assert_broker_healthy(broker)


def gzip_of_zeros(size: int, chunk: int = 1 << 20) -> bytes:
    """A real gzip stream of ``size`` zero bytes in about size/1000 bytes, built fast:
    one compressed chunk, repeated (a full flush makes each copy independent)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    last_block = compressor.flush(zlib.Z_FINISH)
    crc, zeros = 0, bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * (size // chunk) + last_block + struct.pack("<II", crc, size & 0xFFFFFFFF)


INFLATE_LIMIT = 16 << 20


def bombs() -> dict:
    gigabyte = gzip_of_zeros(1 << 30)
    snappy_block = compression.compress(CODEC_SNAPPY, bytes(32 << 10))[len(compression.XERIAL_HEADER):]
    return {
        "1 GiB of zeros, gzip": encode_message(gigabyte, CODEC_GZIP),
        "1 GiB gzip inside gzip": encode_message(
            compression.compress(CODEC_GZIP, encode_message(gigabyte, CODEC_GZIP)), CODEC_GZIP),
        "snappy blocks, 1 MB of them": encode_message(
            compression.XERIAL_HEADER + snappy_block * ((1 << 20) // len(snappy_block)), CODEC_SNAPPY),
        "snappy block declaring 4 GiB": encode_message(b"\xff\xff\xff\xff\x0f" + b"\x00" * 64, CODEC_SNAPPY),
        "payload over max.message.size": encode_message(b"m" * 2_000_001),
    }


def test_oversized_messages_and_decompression_bombs(broker_factory):
    broker = broker_factory(max_message_size=2_000_000, max_inflated_request_bytes=INFLATE_LIMIT)
    worker = broker.worker_pid(owner_slot("bomb", 0, 2))
    acceptor = acceptor_pid(broker)
    peaks_before = memory_kb(worker, "VmHWM"), memory_kb(acceptor, "VmHWM")
    for name, wrapper in bombs().items():
        assert len(wrapper) < 3_000_000, name
        with WireClient(broker.port, timeout=30) as client:
            ack = client.produce_acked("bomb", 0, wrapper)
            assert ack.error == (5 if "max.message.size" in name else 2), (name, ack)
            client.send(rq.encode_produce("bomb", 0, wrapper))
            assert client.closed_by_broker(), name
        with WireClient(broker.port) as client:
            assert client.fetch("bomb", 0, 0) == (0, b""), name
    worker_growth = memory_kb(worker, "VmHWM") - peaks_before[0]
    acceptor_growth = memory_kb(acceptor, "VmHWM") - peaks_before[1]
    assert worker_growth < 3 * INFLATE_LIMIT // 1024 + 30_000, f"worker peak grew {worker_growth} KB"
    assert acceptor_growth < 30_000, f"acceptor peak grew {acceptor_growth} KB"
    assert not os.path.exists(os.path.join(broker.log_dir, "bomb-0"))
    assert "inflates past" in broker.output() and "max.message.size is 2000000" in broker.output()
    assert_broker_healthy(broker)


# --------------------------------------------------------------------------------------
# The control socket
# --------------------------------------------------------------------------------------


def connects_as_nobody(path: str, groups: list) -> bool:
    """Whether user ``nobody`` with the supplementary ``groups`` can talk to ``path``."""
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report through the exit code
        code = 2
        try:
            os.setgroups(groups)
            os.setgid(65534)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(b'{"command": "status"}\n')
            code = 0 if b'"ok": true' in sock.recv(1 << 16) else 3
        except PermissionError:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 1), f"the probe as nobody failed otherwise (exit {code})"
    return code == 0


@pytest.fixture
def reachable_dir():
    """A directory everybody may pass through (tmp_path's parents are 0700)."""
    directory = tempfile.mkdtemp(prefix="mpbroker-ctl-", dir="/tmp")
    os.chmod(directory, 0o711)
    yield directory
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_control_socket_is_for_the_brokers_user_or_its_group(broker_factory, reachable_dir):
    adm = grp.getgrnam("adm").gr_gid
    private_path = os.path.join(reachable_dir, "private.sock")
    start_with_control_socket(broker_factory("private", start=False, control_socket=private_path), private_path)
    assert stat.S_IMODE(os.stat(private_path).st_mode) == 0o600
    assert not connects_as_nobody(private_path, [adm])
    shared_path = os.path.join(reachable_dir, "shared.sock")
    start_with_control_socket(broker_factory("shared", start=False, control_socket=shared_path,
                                             control_socket_group="adm"), shared_path)
    info = os.stat(shared_path)
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o660, adm)
    assert connects_as_nobody(shared_path, [adm])
    assert not connects_as_nobody(shared_path, [])
    assert call(shared_path, "status")["ok"]


def start_with_control_socket(broker, path: str) -> None:
    broker.socket_path = path  # where LocalBroker asks for the status
    broker.start()


def test_replica_requests_from_a_client_that_is_no_follower(broker):
    """REPLICA_FETCH and LEADER_EPOCH_END are for brokers, but anyone can send them: odd
    values get error codes, and a fetch naming many long topics (its positions once
    went into one ring record larger than the ring takes, which killed the acceptor)
    leaves the broker serving."""
    acceptor_pid = broker.status()["acceptor"]["pid"]
    names = ("t%05d" % i + "x" * 32_000 for i in range(10_000))
    same_worker = [name for name in names if owner_slot(name, 0, 2) == 0][:70]  # one ring gets them all
    long_topics = [(name, 0, 1, 0, 100) for name in same_worker]
    odd = [("replicas", -1, -5, -1, -1), ("replicas", 2**31 - 1, 2**31 - 1, 2**62, 2**31 - 1)]
    with WireClient(broker.port, timeout=30) as client:
        answer = client.request(rq.encode_replica_fetch(7, 2**31 - 1, long_topics + odd))
        parts = rs.decode_replica_fetch(answer)
        assert len(parts) == 72 and all(part.error == ErrorCode.NOT_LEADER for part in parts)
        error, epoch, end = rs.decode_leader_epoch_end(client.request(rq.encode_leader_epoch_end(7, "nope", 0, 0, 0)))
        assert (error, epoch, end) == (ErrorCode.NOT_LEADER, -1, -1)
        assert client.fetch("replicas", 0, 0, 10)[0] == 0  # the connection goes on
    assert broker.status()["acceptor"]["pid"] == acceptor_pid
    assert_broker_healthy(broker)
