"""mpbroker-console-producer and mpbroker-console-consumer as subprocesses, against real
brokers: round trips, keys, compression, start positions, limits, and exit codes."""

import os
import selectors
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from clients import Producer
from clients.partitioner import default_partitioner
from mpbroker.segments.message import CODEC_GZIP, CODEC_SNAPPY

from tests.broker.wire import WireClient

from .helpers import HOST, PARTITIONS, broker_list, free_port, read_topic, set_bytes
from .test_producer import top_level_messages

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _command(tool, brokers, topic, args):
    return [sys.executable, "-m", f"clients.{tool}", "--broker-list", brokers, "--topic", topic, *args]


def console_producer(brokers, topic, lines: bytes, *args, timeout=30):
    return subprocess.run(_command("console_producer", brokers, topic, args), input=lines,
                          capture_output=True, timeout=timeout, cwd=REPO)


def console_consumer(brokers, topic, *args, timeout=30):
    return subprocess.run(_command("console_consumer", brokers, topic, args), capture_output=True,
                          timeout=timeout, cwd=REPO)


def start_consumer(brokers, topic, *args):
    return subprocess.Popen(_command("console_consumer", brokers, topic, args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)


def read_stderr_line(process, timeout=10.0) -> bytes:
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        assert selector.select(timeout), "nothing on stderr"
    return process.stderr.readline()


def by_partition(output: bytes) -> dict:
    """``<partition>\\t<payload>`` lines -> {partition label: [payload, ...]}."""
    parts = defaultdict(list)
    for line in output.splitlines():
        label, _, payload = line.partition(b"\t")
        parts[label.decode()].append(payload)
    return dict(parts)


# --- round trips -----------------------------------------------------------------------------


# Keyless lines go to one random partition per batch: batches of 10 (12 batches) spread them.
@pytest.mark.parametrize("mode", [["--batch-size", "10"], ["--sync"], ["--async", "--batch-size", "10", "--acks", "append"],
                                  ["--sync", "--acks", "flush"]],
                         ids=["default", "sync", "async-append", "sync-flush"])
def test_lines_round_trip(broker, mode):
    lines = [b"line-%03d" % i for i in range(120)]
    produced = console_producer(broker_list(broker), "lines", b"\n".join(lines) + b"\n", *mode)
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr == b""
    if mode[-1:] == ["flush"]:  # flush acks: all fetchable the moment the producer exits
        assert sorted(sum(read_topic(broker.port, "lines").values(), [])) == lines
    consumed = console_consumer(broker_list(broker), "lines", "--from-beginning", "--timeout-ms", "1000",
                                "--print-partition")
    assert consumed.returncode == 0, consumed.stderr
    parts = by_partition(consumed.stdout)
    assert Counter(sum(parts.values(), [])) == Counter(lines)
    assert set(parts) <= {str(p) for p in range(PARTITIONS)} and len(parts) > 1
    for payloads in parts.values():
        assert payloads == sorted(payloads), "per partition, in the order of the input"


def test_last_line_without_newline_and_empty_lines(broker):
    produced = console_producer(broker_list(broker), "edges", b"first\n\nlast-without-newline", "--sync",
                                "--acks", "flush")
    assert produced.returncode == 0, produced.stderr
    stored = sorted(sum(read_topic(broker.port, "edges").values(), []))
    assert stored == [b"", b"first", b"last-without-newline"]


def test_key_separator_partitions_by_key_and_strips_it(broker):
    keys = [b"user-%d" % i for i in range(12)]
    lines = [key + b":" + b"value-%d-%d" % (round_, index) + (b":colon" if round_ == 2 else b"")
             for round_ in range(3) for index, key in enumerate(keys)]
    produced = console_producer(broker_list(broker), "keyed", b"\n".join(lines) + b"\n", "--key-separator", ":")
    assert produced.returncode == 0, produced.stderr
    consumed = console_consumer(broker_list(broker), "keyed", "--from-beginning", "--timeout-ms", "1000",
                                "--print-partition")
    assert consumed.returncode == 0, consumed.stderr
    parts = by_partition(consumed.stdout)
    assert sum(len(v) for v in parts.values()) == len(lines)
    for index, key in enumerate(keys):
        partition = str(default_partitioner(key, PARTITIONS))
        expected = [b"value-0-%d" % index, b"value-1-%d" % index, b"value-2-%d:colon" % index]
        assert [p for p in parts[partition] if p.endswith(b"-%d" % index) or p.endswith(b"-%d:colon" % index)] \
            == expected, f"key {key!r}: same partition, in order, key stripped (only the first separator)"
        for other, payloads in parts.items():
            if other != partition:
                assert not set(payloads) & set(expected)
    assert not any(key in line for line in consumed.stdout.splitlines() for key in keys)


@pytest.mark.parametrize("codec_name, codec", [("gzip", CODEC_GZIP), ("snappy", CODEC_SNAPPY)])
def test_compression(broker, codec_name, codec):
    lines = [b"repetitive line of text %03d" % i for i in range(60)]
    produced = console_producer(broker_list(broker), "cz", b"".join(b"k|" + line + b"\n" for line in lines),
                                "--compression", codec_name, "--key-separator", "|", "--sync", "--acks", "flush")
    assert produced.returncode == 0, produced.stderr
    partition = default_partitioner(b"k", PARTITIONS)
    with WireClient(broker.port) as wire:
        error, data = wire.fetch("cz", partition, 0)
    wrappers = top_level_messages(data)
    assert error == 0 and len(wrappers) == 60  # --sync: one compressed set per line
    assert all(attributes & 3 == codec for attributes, _ in wrappers)
    consumed = console_consumer(broker_list(broker), "cz", "--from-beginning", "--timeout-ms", "700",
                                "--partition", str(partition))
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines


def test_async_compression_batches_lines_into_wrappers(broker):
    lines = [b"batched line %03d" % i for i in range(200)]
    produced = console_producer(broker_list(broker), "czb", b"".join(b"k\t" + line + b"\n" for line in lines),
                                "--compression", "gzip", "--key-separator", "\t", "--batch-size", "50")
    assert produced.returncode == 0, produced.stderr
    partition = default_partitioner(b"k", PARTITIONS)
    consumed = console_consumer(broker_list(broker), "czb", "--from-beginning", "--timeout-ms", "700")
    assert consumed.stdout.splitlines() == lines
    with WireClient(broker.port) as wire:
        _, data = wire.fetch("czb", partition, 0)
    wrappers = top_level_messages(data)
    assert len(wrappers) == 4 and all(a & 3 == CODEC_GZIP for a, _ in wrappers)


# --- consumer start positions and limits ---------------------------------------------------------


def produce_to(broker, topic, partition, payloads):
    with Producer(broker_list=broker_list(broker), acks="flush",
                  partitioner_class=lambda key, n: partition) as producer:
        return producer.send(topic, payloads)


def test_partition_and_offset_with_print_offset(broker):
    payloads = [b"m%d" % i for i in range(6)]
    produce_to(broker, "pos", 2, payloads)
    produce_to(broker, "pos", 1, [b"elsewhere"])
    start = set_bytes(payloads[:2])
    consumed = console_consumer(broker_list(broker), "pos", "--partition", "2", "--offset", str(start),
                                "--print-offset", "--timeout-ms", "500")
    assert consumed.returncode == 0, consumed.stderr
    expected = [b"%d\t%s" % (start + set_bytes(payloads[2:i + 1]), payloads[i]) for i in range(2, 6)]
    assert consumed.stdout.splitlines() == expected
    both = console_consumer(broker_list(broker), "pos", "--partition", "2", "--offset", "0", "--print-offset",
                            "--print-partition", "--timeout-ms", "500")
    assert both.stdout.splitlines()[0] == b"2\t%d\tm0" % set_bytes([b"m0"])


def test_offset_past_the_end_restarts_at_the_earliest_with_a_warning(broker):
    produce_to(broker, "pastend", 0, [b"a", b"b"])
    consumed = console_consumer(broker_list(broker), "pastend", "--partition", "0", "--offset", "100000",
                                "--timeout-ms", "500")
    assert consumed.returncode == 0
    assert consumed.stdout.splitlines() == [b"a", b"b"]
    assert b"offset out of range on partition 0; restarting at 0" in consumed.stderr


def test_max_messages_exits_after_exactly_n(broker):
    produce_to(broker, "maxm", 3, [b"x%d" % i for i in range(10)])
    started = time.monotonic()
    consumed = console_consumer(broker_list(broker), "maxm", "--from-beginning", "--max-messages", "4",
                                timeout=20)  # no --timeout-ms: only the count can end it
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [b"x0", b"x1", b"x2", b"x3"]
    assert time.monotonic() - started < 10


def test_max_messages_zero_prints_nothing(broker):
    produce_to(broker, "max0", 0, [b"one", b"two"])
    consumed = console_consumer(broker_list(broker), "max0", "--from-beginning", "--max-messages", "0",
                                "--timeout-ms", "500")
    assert consumed.returncode == 0
    assert consumed.stdout == b""


def test_default_start_is_the_latest_offset(broker):
    produce_to(broker, "latest", 1, [b"old-1", b"old-2"])
    produce_to(broker, "latest", 2, [b"old-3"])
    process = start_consumer(broker_list(broker), "latest", "--max-messages", "3", "--timeout-ms", "15000")
    try:
        time.sleep(1.0)  # let it take the latest offsets
        produce_to(broker, "latest", 1, [b"new-1"])
        produce_to(broker, "latest", 2, [b"new-2", b"new-3"])
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert sorted(out.splitlines()) == [b"new-1", b"new-2", b"new-3"]


def test_empty_topic_says_it_waits_then_prints_what_arrives(broker):
    process = start_consumer(broker_list(broker), "empty", "--max-messages", "2", "--print-partition",
                             "--timeout-ms", "15000")
    try:
        assert b"has no messages yet; waiting" in read_stderr_line(process)
        produce_to(broker, "empty", 3, [b"first", b"second"])
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert out.splitlines() == [b"3\tfirst", b"3\tsecond"]


def test_several_brokers_label_broker_and_partition(broker_factory):
    first, second = broker_factory("one"), broker_factory("two")
    both = f"0:{HOST}:{first.port},1:{HOST}:{second.port}"
    with Producer(broker_list=both, acks="flush", partitioner_class=lambda key, n: int(key)) as producer:
        assert len(producer.partitions_for("two")) == 2 * PARTITIONS
        producer.send("two", b"on-0-1", key="1")
        producer.send("two", b"on-1-2", key=str(PARTITIONS + 2))
    consumed = console_consumer(both, "two", "--from-beginning", "--timeout-ms", "500", "--print-partition")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == [b"0-1\ton-0-1", b"1-2\ton-1-2"]


# --- errors and exit codes -------------------------------------------------------------------------


def test_unreachable_broker_exits_3_naming_it():
    port = free_port()
    target = f"{HOST}:{port}"
    produced = console_producer(target, "t", b"x\n")
    assert produced.returncode == 3
    assert f"{HOST}:{port}".encode() in produced.stderr
    consumed = console_consumer(target, "t", "--timeout-ms", "500")
    assert consumed.returncode == 3
    assert f"{HOST}:{port}".encode() in consumed.stderr


@pytest.mark.parametrize("tool", ["console_producer", "console_consumer"])
@pytest.mark.parametrize("args", [["--topic", "../x"], ["--topic", "a/b"], ["--topic", ""]],
                         ids=["dotdot", "slash", "empty"])
def test_bad_topic_exits_2(broker, tool, args):
    result = subprocess.run([sys.executable, "-m", f"clients.{tool}", "--broker-list", broker_list(broker), *args],
                            input=b"x\n", capture_output=True, timeout=30, cwd=REPO)
    assert result.returncode == 2
    assert b"illegal topic name" in result.stderr
    assert broker.status()["partitions"] == []


@pytest.mark.parametrize("args", [["--offset", "0"], ["--offset", "0", "--from-beginning", "--partition", "0"],
                                  ["--partition", "-1"], ["--max-messages", "many"]],
                         ids=["offset-without-partition", "offset-and-from-beginning", "negative-partition",
                              "not-a-number"])
def test_consumer_bad_arguments_exit_2(broker, args):
    consumed = console_consumer(broker_list(broker), "t", *args, "--timeout-ms", "300")
    assert consumed.returncode == 2
    assert consumed.stdout == b""


@pytest.mark.parametrize("brokers", ["nohost", "h:p:q:r"])
def test_bad_broker_list_exits_2(brokers):
    assert console_producer(brokers, "t", b"x\n").returncode == 2
    assert console_consumer(brokers, "t").returncode == 2


def test_producer_bad_arguments_exit_2(broker):
    assert console_producer(broker_list(broker), "t", b"x\n", "--compression", "lz4").returncode == 2
    assert console_producer(broker_list(broker), "t", b"x\n", "--sync", "--async").returncode == 2
    assert console_producer(broker_list(broker), "t", b"x\n", "--batch-size", "0").returncode == 2
    assert broker.status()["partitions"] == []


@pytest.mark.parametrize("mode", [[], ["--sync", "--acks", "flush"]], ids=["async", "sync"])
def test_line_without_separator_exits_2_after_delivering_the_earlier_lines(broker, mode):
    produced = console_producer(broker_list(broker), "nosep", b"a:1\nb:2\nno separator here\nc:3\n",
                                "--key-separator", ":", *mode)
    assert produced.returncode == 2
    assert b"line 3 has no key separator" in produced.stderr
    consumed = console_consumer(broker_list(broker), "nosep", "--from-beginning", "--timeout-ms", "700")
    assert sorted(consumed.stdout.splitlines()) == [b"1", b"2"]


def test_console_consumer_stops_with_code_3_when_the_broker_goes_away(fixed_port_broker):
    broker = fixed_port_broker
    produce_to(broker, "gone", 0, [b"m"])
    process = start_consumer(broker_list(broker), "gone", "--from-beginning")
    try:
        assert process.stdout.readline() == b"m\n"
        broker.stop()
        assert process.wait(20) == 3
        assert f"{HOST}:{broker.port}".encode() in process.stderr.read()
    finally:
        process.kill()
        process.wait()
