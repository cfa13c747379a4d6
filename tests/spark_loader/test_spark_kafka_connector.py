"""Spark's own Kafka source (``spark-sql-kafka-0-10``, fetched by
``mpbroker.testing.spark_kafka``) reading mpbroker's modern listener: a real broker (two
workers, a two-partition topic), records produced with confluent-kafka (keys, headers,
timestamps; several batches per partition), a real SparkSession (``local[2]``).

A batch read (the README's block ``spark-kafka``, run as written but for the address and the
topic) gives every record once with its key, value, partition, offset (the one the producer's
delivery report gave), timestamp and headers; so does one split into more Spark partitions
than the topic has (``minPartitions``: ranges cut at offsets inside batches). A streaming
query (parquet sink, checkpoint, ``trigger(availableNow=True)``) run twice, with records
produced in between, writes every record exactly once.

No option is needed for mpbroker's byte offsets, not even ``failOnDataLoss=false``: a batch
stored at bytes [p, q) with n records holds offsets q-n .. q-1, so offsets between batches
(p .. q-n-1) hold no record, and the earliest offset (0) is no record's either. Spark's source
reads from an offset to the next record it gets; a record above the offset it asked for, at or
above the partition's earliest offset, is what it also meets on a compacted topic or after
transaction markers: it skips the gap as invisible records, not as lost data (only a gap below
the earliest offset, data that retention deleted, is data loss). After a record it asks for
offset + 1, which after a batch's last record is q, the next batch's start (or the log end: the
range's end offset, where it stops). A fetch at an offset inside a batch (a range cut by
``minPartitions``) is answered from that batch's start, as Kafka does; the client drops the
records below the offset. Offsets count bytes, so ``maxOffsetsPerTrigger`` and Spark's
offset-range sizes are in bytes of log, not records.

Skipped, with the reason, only where the connector cannot be had: no pyspark, Java or Maven
(and nothing in the cache), or Maven Central out of reach.
"""

import os
import time
import warnings

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from mpbroker.testing import spark_kafka
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import TIMEOUT_S, assert_healthy
from tests.readme import readme_blocks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

README_BLOCK = "spark-kafka"
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def jars():
    why = spark_kafka.missing()
    if why:
        pytest.skip(f"Spark's Kafka connector cannot be fetched here: {why}")
    try:
        jars = spark_kafka.fetch_jars()
    except spark_kafka.MavenCentralUnreachable as e:
        pytest.skip(f"Maven Central does not answer: {str(e)[:500]}")
    spark, connector = spark_kafka.spark_version(), spark_kafka.connector_version()
    if connector != spark:
        warnings.warn(f"Maven Central has no {spark_kafka.coordinate(spark)}: Spark {spark} runs the newest "
                      f"connector it has, {connector}, in this test")
    return jars


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("spark-kafka"), num_workers=2, num_partitions=2) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture(scope="module")
def spark(jars):
    """``spark.jars`` reaches the executors and, when this starts the JVM, the driver's class
    path; ``ADD JAR`` also puts them in the session's class loader, for a JVM that an earlier
    test module of the same run started (the driver would not find the source otherwise)."""
    session = (SparkSession.builder.master("local[2]").appName("spark-kafka-connector")
               .config("spark.jars", ",".join(jars))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    for jar in jars:
        session.sql(f"ADD JAR '{jar}'")
    yield session
    session.stop()


def produce(broker, topic: str, prefix: str, count: int, batches: int) -> set:
    """``count`` records over both partitions in ``batches`` flushes (a batch per partition
    each: gaps between their offsets); every record as ``rows`` gives it, with the partition
    and offset its delivery report gave (a report carries no headers: those are the sent ones)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    sent, placed = {}, {}
    for i in range(count):
        key = f"{prefix}-key-{i}".encode() if i % 5 else None
        value = f"{prefix}-value-{i} ".encode() * (i % 7 + 1)
        headers = [("n", str(i).encode()), ("empty", None)] if i % 3 else []
        sent[value] = (key, BASE_TS + i, tuple(headers))
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=BASE_TS + i, partition=i % 2,
                         on_delivery=lambda err, msg: placed.setdefault(msg.value(), (err, msg.partition(),
                                                                                      msg.offset())))
        if (i + 1) % (count // batches) == 0:
            assert producer.flush(TIMEOUT_S) == 0
    assert producer.flush(TIMEOUT_S) == 0
    assert [err for err, _, _ in placed.values()] == [None] * count
    return {(placed[value][1], placed[value][2], key, value, timestamp, headers)
            for value, (key, timestamp, headers) in sent.items()}


def rows(frame, topic: str) -> list:
    """The frame's records in the shape ``produce`` returns them (each of ``topic``)."""
    picked = frame.selectExpr("topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ms",
                              "headers").collect()
    assert {r.topic for r in picked} == {topic}
    return [(r.partition, r.offset, r.key, r.value, r.ms, tuple((h.key, h.value) for h in r.headers or ()))
            for r in picked]


def readme_frame(spark, broker, topic: str):
    """The README's block, run as written with this broker's modern listener and ``topic``."""
    code = readme_blocks.block(README_BLOCK)
    assert f"--packages {spark_kafka.coordinate(spark_kafka.spark_version())}" in code
    code = code.replace('"localhost:9093"', f'"{broker.bootstrap}"').replace('"visits"', f'"{topic}"')
    scope = {"spark": spark}
    exec(compile(code, f"README.md block {README_BLOCK}", "exec"), scope)
    return scope["frame"]


def has_gaps(expected: set) -> bool:
    """Whether offsets in some partition skip numbers (the case this file is about)."""
    for partition in (0, 1):
        offsets = sorted(o for p, o, *_ in expected if p == partition)
        if offsets[-1] - offsets[0] + 1 != len(offsets):
            return True
    return False


def test_the_jars_are_the_connector_and_only_what_pyspark_does_not_ship(jars):
    """Two versions of one class on a class path (scala-library, hadoop-client, spark-tags)
    would make Spark fail in ways far from their cause."""
    kept = {spark_kafka.artifact_name(os.path.basename(jar)) for jar in jars}
    shipped = {spark_kafka.artifact_name(name) for name in os.listdir(spark_kafka.pyspark_jars_dir())}
    assert {spark_kafka.CONNECTOR, "kafka-clients"} <= kept and not kept & shipped
    assert "scala-library" in {spark_kafka.artifact_name(name) for name in spark_kafka.fetch_record()["left_out"]}
    assert spark_kafka.connector_version().split(".")[0] == spark_kafka.spark_version().split(".")[0]


def test_a_batch_read_gives_every_record_once_with_its_offset_key_timestamp_and_headers(spark, broker):
    expected = produce(broker, "batch-read", "b", 60, batches=4)
    assert has_gaps(expected) and min(o for _, o, *_ in expected) > 0

    got = rows(readme_frame(spark, broker, "batch-read"), "batch-read")

    assert len(got) == len(expected) and set(got) == expected


def test_a_batch_read_split_inside_batches_gives_every_record_once(spark, broker):
    """``minPartitions`` 7 over 2 partitions: Spark cuts each partition's range at offsets
    that fall inside batches (and between them); each piece is a task of its own."""
    expected = produce(broker, "split-read", "s", 80, batches=2)
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", "split-read").option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").option("includeHeaders", "true")
             .option("minPartitions", "7").load())
    assert frame.rdd.getNumPartitions() >= 7

    got = rows(frame, "split-read")

    assert len(got) == len(expected) and set(got) == expected


def test_a_streaming_query_run_twice_writes_every_record_exactly_once(spark, broker, tmp_path):
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_query():
        started = time.monotonic()
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", "streamed").option("startingOffsets", "earliest")
                 .option("includeHeaders", "true").load()
                 .selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ms", "headers")
                 .writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the availableNow query did not finish in 120 s"
        assert query.exception() is None, query.exception()
        return time.monotonic() - started

    def written() -> list:
        table = ds.dataset(str(output), format="parquet").to_table()
        return [(r["partition"], r["offset"], r["key"], r["value"], r["ms"],
                 tuple((h["key"], h["value"]) for h in r["headers"] or ()))
                for r in table.to_pylist()]

    first = produce(broker, "streamed", "first", 40, batches=2)
    run_query()
    assert sorted(written()) == sorted(first)

    later = produce(broker, "streamed", "later", 30, batches=3)
    run_query()
    got = written()
    assert len(got) == len(first | later) and set(got) == first | later
