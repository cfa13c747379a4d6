"""kcat (librdkafka's command-line client, Debian's ``kcat`` package: tests/run.sh
installs it) against the modern listener: metadata (-L), keyed messages with headers
(-K: -H), consumed back partition by partition (-C -e), with each codec (-z). kcat
1.7's librdkafka may store some codecs uncompressed; what comes back is checked, not
how it was stored."""

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat")


def kcat(broker, *args, input_text=None):
    assert KCAT, "kcat is missing (tests/run.sh installs Debian's kcat)"
    run = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=input_text, capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout


# For reading a partition to its end many times over: a fetch that finds the end answers within
# 20 ms, not librdkafka's 500 ms (fetch.wait.max.ms), and no second metadata round, so that
# each read takes ms, not half a second (test_consume_all_partitions_from_an_offset reads at
# kcat's defaults).
QUICK_END = ["-X", "fetch.wait.max.ms=20", "-X", "topic.metadata.refresh.interval.ms=-1"]


def consume(broker, topic, partition, *options):
    out = kcat(broker, *options, "-C", "-t", topic, "-p", str(partition), "-e", "-f", "%k %s %h %o\n")
    return [line.split(" ") for line in out.splitlines()]


def test_metadata(kafka_broker, topic):
    kcat(kafka_broker, "-P", "-t", topic, "-K:", input_text="k:v\n")
    metadata = json.loads(kcat(kafka_broker, "-L", "-J"))
    assert metadata["brokers"] == [{"id": 0, "name": kafka_broker.bootstrap}]
    [entry] = [t for t in metadata["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in entry["partitions"]] == [0, 1]
    assert all(p["leader"] == 0 for p in entry["partitions"])
    plain = kcat(kafka_broker, "-L", "-t", topic)
    assert f'topic "{topic}" with 2 partitions' in plain


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_keyed_messages_with_headers(kafka_broker, topic, codec):
    keys = [f"key{i}" for i in range(12)]
    lines = "".join(f"{key}:value-of-{key}\n" for key in keys)
    codec_args = ["-z", codec] if codec else []
    kcat(kafka_broker, "-P", "-t", topic, "-K:", "-H", "trace=abc", "-H", "n=1", *codec_args, input_text=lines)
    seen = {}
    for partition in (0, 1):
        rows = consume(kafka_broker, topic, partition, *QUICK_END)
        offsets = [int(offset) for *_, offset in rows]
        assert offsets == sorted(set(offsets))
        for key, value, headers, _ in rows:
            assert value == f"value-of-{key}" and headers == "trace=abc,n=1"
            assert key not in seen
            seen[key] = partition
    assert sorted(seen) == sorted(keys)
    assert set(seen.values()) == {0, 1}  # the default partitioner spread 12 keys over both
    # the order of one partition is the order produced
    for partition in (0, 1):
        assert [row[0] for row in consume(kafka_broker, topic, partition, *QUICK_END)] == [
            key for key in keys if seen[key] == partition]


def test_consume_all_partitions_from_an_offset(kafka_broker, topic):
    kcat(kafka_broker, "-P", "-t", topic, "-p", "1", "-K:", input_text="a:1\nb:2\nc:3\n")
    rows = consume(kafka_broker, topic, 1)
    second = rows[1][3]
    out = kcat(kafka_broker, "-C", "-t", topic, "-p", "1", "-o", second, "-e", "-f", "%k %s\n")
    assert out.splitlines() == ["b 2", "c 3"]
    assert consume(kafka_broker, topic, 0) == []
