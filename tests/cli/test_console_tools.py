"""mpbroker-console-producer and mpbroker-console-consumer as subprocesses, against real
brokers: round trips, keys, compression, start positions (offsets, offsets by time,
offsets inside messages), damaged and oversized messages, unknown topics, limits, and
exit codes."""

import glob
import os
import selectors
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from mpbroker.clients import Producer
from mpbroker.clients.producer.partitioner import default_partitioner
from mpbroker.codec.message import CODEC_GZIP, CODEC_SNAPPY, V1_OVERHEAD
from tests.broker.wire import WireClient
from tests.clients.helpers import HOST, PARTITIONS, broker_list, free_port, read_topic, set_bytes
from tests.clients.producer.test_producer import top_level_messages

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _command(tool, brokers, topic, args):
    return [sys.executable, "-m", f"mpbroker.cli.{tool}", "--broker-list", brokers, "--topic", topic, *args]


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


def printed_offsets(output: bytes) -> list:
    """``offset=<o> next_offset=<n>\\t<payload>`` lines -> [(o, n, payload)]."""
    parsed = []
    for line in output.splitlines():
        offsets, payload = line.split(b"\t")
        offset, next_offset = offsets.split(b" ")
        assert offset.startswith(b"offset=") and next_offset.startswith(b"next_offset="), line
        parsed.append((int(offset[7:]), int(next_offset[12:]), payload))
    return parsed


def test_partition_and_offset_with_print_offset(broker):
    payloads = [b"m%d" % i for i in range(6)]
    produce_to(broker, "pos", 2, payloads)
    produce_to(broker, "pos", 1, [b"elsewhere"])
    start = set_bytes(payloads[:2])
    consumed = console_consumer(broker_list(broker), "pos", "--partition", "2", "--offset", str(start),
                                "--print-offset", "--timeout-ms", "500")
    assert consumed.returncode == 0, consumed.stderr
    expected = [(start + set_bytes(payloads[2:i]), start + set_bytes(payloads[2:i + 1]), payloads[i])
                for i in range(2, 6)]
    assert printed_offsets(consumed.stdout) == expected
    both = console_consumer(broker_list(broker), "pos", "--partition", "2", "--offset", "0", "--print-offset",
                            "--print-partition", "--timeout-ms", "500")
    assert both.stdout.splitlines()[0] == b"2\toffset=0 next_offset=%d\tm0" % set_bytes([b"m0"])


def test_a_printed_offset_given_to_offset_prints_that_message_again(broker):
    """--print-offset's offset= is where the message starts; inside a compressed set that
    is the set's start, so the message comes again with the ones before it in the set."""
    produce_to(broker, "again", 0, [b"plain-0", b"plain-1"])
    with Producer(broker_list=broker_list(broker), acks="flush", compression_codec="gzip",
                  partitioner_class=lambda key, n: 0) as producer:
        producer.send("again", [b"zipped-0", b"zipped-1", b"zipped-2"])
    produce_to(broker, "again", 0, [b"plain-2"])
    consumed = console_consumer(broker_list(broker), "again", "--from-beginning", "--print-offset",
                                "--timeout-ms", "500")
    assert consumed.returncode == 0, consumed.stderr
    printed = printed_offsets(consumed.stdout)
    assert [payload for _, _, payload in printed] == [b"plain-0", b"plain-1", b"zipped-0", b"zipped-1",
                                                        b"zipped-2", b"plain-2"]
    assert all(offset < next_offset or payload.startswith(b"zipped") for offset, next_offset, payload in printed)
    for index in (1, 3, 5):  # a plain message, one inside the compressed set, the last one
        offset, _, payload = printed[index]
        again = console_consumer(broker_list(broker), "again", "--partition", "0", "--offset", str(offset),
                                 "--timeout-ms", "300")
        assert again.returncode == 0, again.stderr
        lines = again.stdout.splitlines()
        assert payload in lines, f"--offset {offset} skipped {payload!r}: {lines}"
        everything = [p for _, _, p in printed]
        assert lines == everything[everything.index(lines[0]):], "in order from there"


def test_offset_past_the_end_or_before_the_start_is_an_error(broker):
    produce_to(broker, "pastend", 0, [b"a", b"b"])
    end = set_bytes([b"a", b"b"])
    for offset, message in (("100000", f"offset 100000 is past the log end {end} of pastend-0"),
                            ("-5", "offset -5 is before the log start 0 of pastend-0")):
        consumed = console_consumer(broker_list(broker), "pastend", "--partition", "0", "--offset", offset,
                                    "--timeout-ms", "500")
        assert consumed.returncode == 2
        assert consumed.stdout == b""
        assert consumed.stderr == f"mpbroker-console-consumer: {message}\n".encode()
    at_end = console_consumer(broker_list(broker), "pastend", "--partition", "0", "--offset", str(end),
                              "--timeout-ms", "300")
    assert (at_end.returncode, at_end.stdout, at_end.stderr) == (0, b"", b""), "the log end is a start"


@pytest.mark.parametrize("where", ["length-field", "payload", "later-segment", "large-payload"])
def test_an_offset_inside_a_message_is_one_line_naming_the_nearest_start(broker_factory, where):
    broker = broker_factory(log_file_size=2000 if where == "later-segment" else 1 << 30)
    if where == "large-payload":  # b"xxxx" read as a length is 2 GB: the fetch size must not chase it
        payloads = [b"x" * 50_000 for _ in range(40)]
    else:
        payloads = [b"message-%03d" % i for i in range(100)]
    for start in range(0, len(payloads), 10):
        produce_to(broker, "inside", 0, payloads[start:start + 10])
    index = {"length-field": 0, "payload": 0, "later-segment": 77, "large-payload": 3}[where]
    nearest = set_bytes(payloads[:index])
    offset = nearest + (1 if where == "length-field" else V1_OVERHEAD + 3)
    consumed = console_consumer(broker_list(broker), "inside", "--partition", "0", "--offset", str(offset),
                                "--timeout-ms", "500", "--fetch-size", "1024")
    assert consumed.returncode == 2
    assert consumed.stdout == b""
    assert consumed.stderr == (f"mpbroker-console-consumer: {offset} is not the start of a message in inside-0; "
                               f"the nearest earlier message starts at {nearest}\n").encode()
    good = console_consumer(broker_list(broker), "inside", "--partition", "0", "--offset", str(nearest),
                            "--max-messages", "1", "--timeout-ms", "500")
    assert good.returncode == 0 and good.stdout == payloads[index] + b"\n"


def test_a_damaged_message_prints_the_messages_before_it_then_exits_1(broker):
    payloads = [b"good-%d" % i for i in range(4)] + [b"damaged"] + [b"after-%d" % i for i in range(3)]
    produce_to(broker, "damaged", 1, payloads)
    bad = set_bytes(payloads[:4])
    path = os.path.join(broker.log_dir, "damaged-1", "%020d.kafka" % 0)
    with open(path, "r+b") as segment:  # one payload byte: the CRC fails
        segment.seek(bad + V1_OVERHEAD + 1)
        segment.write(b"X")
    consumed = console_consumer(broker_list(broker), "damaged", "--from-beginning", "--timeout-ms", "500")
    assert consumed.returncode == 1
    assert consumed.stdout.splitlines() == payloads[:4]
    assert consumed.stderr == (f"mpbroker-console-consumer: message at offset {bad} of damaged-1 fails its CRC "
                               f"check\n").encode()
    after = console_consumer(broker_list(broker), "damaged", "--partition", "1", "--offset",
                             str(bad + set_bytes([b"damaged"])), "--timeout-ms", "500")
    assert after.returncode == 0 and after.stdout.splitlines() == payloads[5:]


def test_a_message_larger_than_max_fetch_size_exits_1_and_a_larger_one_reads_it(broker):
    big = b"B" * (200 * 1024)
    produce_to(broker, "bigone", 0, [b"before", big, b"after"])
    capped = console_consumer(broker_list(broker), "bigone", "--from-beginning", "--timeout-ms", "500",
                              "--fetch-size", "1024", "--max-fetch-size", "65536")
    assert capped.returncode == 1
    assert capped.stdout == b"before\n"
    assert b"larger than max_fetch_size (65536 bytes); a larger --max-fetch-size reads it" in capped.stderr
    assert len(capped.stderr.splitlines()) == 1
    grown = console_consumer(broker_list(broker), "bigone", "--from-beginning", "--timeout-ms", "500",
                             "--fetch-size", "1024")
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.splitlines() == [b"before", big, b"after"]


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


def test_unknown_topic_is_an_error_naming_it(broker):
    produce_to(broker, "known", 0, [b"x"])
    consumed = console_consumer(broker_list(broker), "unknown", "--timeout-ms", "5000")
    assert consumed.returncode == 2
    assert consumed.stderr == (f"mpbroker-console-consumer: unknown topic 'unknown': no partition has a log on "
                               f"{HOST}:{broker.port}; --wait-for-topic waits for it\n").encode()
    assert not os.path.exists(os.path.join(broker.log_dir, "unknown-0")), "asking made no log"


def test_wait_for_topic_waits_then_prints_what_arrives(broker):
    process = start_consumer(broker_list(broker), "empty", "--max-messages", "2", "--print-partition",
                             "--timeout-ms", "15000", "--wait-for-topic")
    try:
        assert b"topic 'empty' does not exist yet" in read_stderr_line(process)
        produce_to(broker, "empty", 3, [b"first", b"second"])
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert out.splitlines() == [b"3\tfirst", b"3\tsecond"]


def test_an_existing_topic_without_messages_is_waited_for(broker):
    produce_to(broker, "sparse", 0, [b"on-0"])
    process = start_consumer(broker_list(broker), "sparse", "--partition", "2", "--max-messages", "1",
                             "--timeout-ms", "15000")
    try:
        assert b"topic 'sparse' has no messages yet; waiting" in read_stderr_line(process)
        produce_to(broker, "sparse", 2, [b"on-2"])
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert out == b"on-2\n"


def test_offset_by_time_starts_at_the_segment_offsets_gives(broker_factory):
    broker = broker_factory(log_file_size=300)
    for i in range(6):  # 106-byte sets, 2 per segment
        produce_to(broker, "bytime", 1, [b"%02d-" % i + b"x" * 40, b"%02d-" % i + b"y" * 40])
    files = sorted(glob.glob(os.path.join(broker.log_dir, "bytime-1", "*.kafka")))
    bases = [int(os.path.basename(f)[:20]) for f in files]
    assert len(bases) == 3
    now = time.time()
    for age, path in enumerate(reversed(files[:-1]), 1):  # closed segments last written 1 h, 2 h ago
        os.utime(path, (now - age * 3600, now - age * 3600))
    everything = [b"%02d-" % i + fill * 40 for i in range(6) for fill in (b"x", b"y")]
    per_segment = len(everything) // 3

    def from_time(text):
        run = console_consumer(broker_list(broker), "bytime", "--partition", "1", "--offset-by-time", text,
                               "--timeout-ms", "300")
        assert run.returncode == 0, run.stderr
        return run.stdout.splitlines()

    ninety_minutes_ago = int((now - 1.5 * 3600) * 1000)
    assert from_time(str(ninety_minutes_ago)) == everything  # the oldest segment was written before it
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 1800))
    assert from_time(iso) == everything[per_segment:]  # the second segment was written before it
    assert from_time("2001-01-01") == everything, "before every segment: the earliest offset"
    assert from_time(str(int((now + 3600) * 1000))) == [], "after the last write: the log end"
    bad = console_consumer(broker_list(broker), "bytime", "--offset-by-time", "yesterday")
    assert bad.returncode == 2 and b"time 'yesterday' is neither" in bad.stderr


def test_bootstrap_server_is_an_alias_of_broker_list(broker):
    target = broker_list(broker)
    produced = subprocess.run([sys.executable, "-m", "mpbroker.cli.console_producer", "--bootstrap-server", target,
                               "--topic", "alias", "--sync", "--acks", "flush"], input=b"via-alias\n",
                              capture_output=True, timeout=30, cwd=REPO)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([sys.executable, "-m", "mpbroker.cli.console_consumer", "--bootstrap-server", target,
                               "--topic", "alias", "--from-beginning", "--timeout-ms", "500"],
                              capture_output=True, timeout=30, cwd=REPO)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == b"via-alias\n"


def test_producer_help_says_what_fire_and_forget_loses():
    result = subprocess.run([sys.executable, "-m", "mpbroker.cli.console_producer", "--help"], capture_output=True,
                            timeout=30, cwd=REPO)
    text = b" ".join(result.stdout.split())
    assert b"none (the default, 0.7's fire-and-forget)" in text
    assert b"is lost without an error and the exit code is 0" in text
    assert b"--bootstrap-server" in text


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
    result = subprocess.run([sys.executable, "-m", f"mpbroker.cli.{tool}", "--broker-list", broker_list(broker), *args],
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
