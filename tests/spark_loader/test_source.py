"""The ``mpbroker`` Spark source against real brokers on local[2]: batch reads with every
message once and its broker, partition and offset; streaming queries into Parquet with
Spark's checkpoint (availableNow, read limits cutting at message boundaries, a second run
taking only what came since); the records of modern clients with key, timestamp and
headers; the options of Spark's Kafka source; and bad input refused with a clear error."""

import json
import os
import subprocess
import sys

import pytest

from mpbroker.spark_loader import register_source
from mpbroker.spark_loader.source.offsets import DataLossError
from mpbroker.spark_loader.state import source_starting_offsets
from tests.clients.helpers import wait_for
from tests.clients.modern import produce_modern, records, wait_readable
from tests.spark_loader.loads import (
    HOST,
    REPO,
    broker_list,
    cli_env,
    earliest_offsets,
    kill_group,
    load,
    log_ends,
    produce,
    spark,
)

__all__ = ["spark"]  # the module-scoped SparkSession fixture


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    register_source(spark)


def brokers_option(*brokers) -> str:
    return ",".join(f"{b.properties['brokerid']}:{HOST}:{b.port}" for b in brokers)


def rows_of(frame) -> set:
    return {(r.topic, r.broker, r.partition, r.offset, bytes(r.value)) for r in frame.collect()}


def sent_rows(sent) -> set:
    return {(s.topic, s.broker, s.partition, s.offset, s.payload) for s in sent}


def stream_to_parquet(spark, output, checkpoint, **options):
    """One availableNow run of a streaming query into Parquet; returns its progress list."""
    reader = spark.readStream.format("mpbroker")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return query.recentProgress


def test_a_batch_read_gives_every_message_once_with_its_place_in_the_log(spark, broker_factory):
    one = broker_factory("b1", brokerid=1, num_partitions=2)
    two = broker_factory("b2", brokerid=2, num_partitions=2)
    sent = produce(broker_list(one, two), "views", 200) + produce(broker_list(one, two), "views", 100, first=200,
                                                                   codec="gzip")
    frame = spark.read.format("mpbroker").option("brokers", brokers_option(one, two)).option("subscribe", "views").load()
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "broker"]
    rows = frame.collect()
    assert len(rows) == len(sent)
    assert rows_of(frame) == sent_rows(sent)
    assert all(r.key is None and r.timestamp is None for r in rows)

    # endingOffsets cuts it; startingOffsets of JSON per partition (<broker>-<partition>).
    ends = log_ends(one.port, "views", 2)
    middle = next(s.offset for s in sent if (s.broker, s.partition) == (1, 0) and s.offset > ends[0] // 2)
    frame = (spark.read.format("mpbroker").option("brokers", brokers_option(one, two)).option("assign",
             json.dumps({"views": ["1-0"]})).option("startingOffsets", json.dumps({"views": {"1-0": middle}}))
             .load())
    assert rows_of(frame) == sent_rows(s for s in sent if (s.broker, s.partition) == (1, 0) and s.offset >= middle)
    frame = (spark.read.format("mpbroker").option("brokers", brokers_option(one, two)).option("subscribe", "views")
             .option("endingOffsets", json.dumps({"views": {"1-0": middle}})).option("minPartitions", "8").load())
    assert rows_of(frame) == sent_rows(s for s in sent if (s.broker, s.partition) != (1, 0) or s.offset < middle)


def test_a_streaming_query_writes_every_message_once_in_batches_the_limit_cuts(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", brokerid=1, num_partitions=2)
    sent = produce(broker_list(broker), "clicks", 300)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"brokers": brokers_option(broker), "subscribe": "clicks", "maxBytesPerTrigger": 4000}
    progress = stream_to_parquet(spark, output, checkpoint, **options)
    assert len([p for p in progress if p["numInputRows"]]) >= 3  # the limit made several batches
    assert all(p["numInputRows"] * 20 <= 4000 for p in progress)  # each message is > 20 bytes
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(sent)
    assert spark.read.parquet(str(output)).count() == len(sent)

    more = produce(broker_list(broker), "clicks", 50, first=300)
    stream_to_parquet(spark, output, checkpoint, **options)
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(sent + more)
    assert spark.read.parquet(str(output)).count() == len(sent + more)

    # maxOffsetsPerTrigger counts messages; offsets stay on message boundaries.
    output2, checkpoint2 = tmp_path / "out2", tmp_path / "checkpoint2"
    progress = stream_to_parquet(spark, output2, checkpoint2, brokers=brokers_option(broker), subscribe="clicks",
                                 maxOffsetsPerTrigger=100)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]][:3] == [100, 100, 100]
    assert spark.read.parquet(str(output2)).count() == len(sent + more)


def test_records_of_modern_clients_come_with_key_timestamp_and_headers(spark, broker_factory):
    broker = broker_factory("b1", brokerid=1, num_partitions=1)
    triples = records("m", 120)
    produce_modern(broker, "modern", triples, compression="lz4")
    wait_readable(broker.port, "modern", len(triples))
    frame = (spark.read.format("mpbroker").option("brokers", brokers_option(broker)).option("subscribe", "modern")
             .option("includeHeaders", "true").load())
    assert frame.columns[-2:] == ["headers", "broker"]
    rows = sorted(frame.collect(), key=lambda r: r.offset)
    assert [(r.key and bytes(r.key), bytes(r.value)) for r in rows] == [(k, v) for k, v, _ in triples]
    assert [[(h.key, h.value and bytes(h.value)) for h in r.headers] for r in rows] == [h for _, _, h in triples]
    assert all(r.timestamp is not None and r.timestampType == 0 for r in rows)
    assert len({r.offset for r in rows}) == len(rows)


BAD_OPTIONS = [
    ({"subscribe": "nosuch"}, "nosuch"),
    ({"subscribe": "views", "startingOffsets": "{oops"}, "startingOffsets '{oops' is not earliest, latest or JSON"),
    ({"subscribe": "views", "startingOffsets": json.dumps({"views": {"zero": 0}})}, "neither"),
    ({"subscribe": "views", "startingOffsets": json.dumps({"views": {"1-5": 0}})}, "partitions that do not exist"),
    ({"subscribe": "views", "assign": json.dumps({"views": [0]})}, "exactly one of 'subscribe'"),
    ({"subscribe": "views", "maxBytesPerTrigger": "-3"}, "'maxBytesPerTrigger' must be an integer >= 1"),
    ({"subscribe": "views", "startingOffset": "earliest"}, "unknown option.*startingoffset"),
    ({"subscribe": "views", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
    ({"assign": json.dumps({"views": ["7-0"]})}, "do not exist.*views/1-0"),
    ({"subscribePattern": "vi.*"}, "'subscribePattern' needs 'zookeeper'"),
]


def test_bad_options_are_refused_with_a_clear_error(spark, broker_factory):
    broker = broker_factory("b1", brokerid=1, num_partitions=2)
    produce(broker_list(broker), "views", 20)
    for options, message in BAD_OPTIONS:
        reader = spark.read.format("mpbroker").option("brokers", brokers_option(broker))
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception, match=message):
            reader.load().collect()
    with pytest.raises(Exception, match="exactly one of the options 'brokers'"):
        spark.read.format("mpbroker").option("subscribe", "views").load().collect()


def test_an_offset_inside_a_message_and_data_lost_to_retention_are_errors(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", brokerid=1, num_partitions=1, log_file_size=1024, log_retention_size=2048)
    sent = produce(broker_list(broker), "gone", 40)
    inside = sent[3].offset + 5
    reader = (spark.read.format("mpbroker").option("brokers", brokers_option(broker)).option("subscribe", "gone")
              .option("startingOffsets", json.dumps({"gone": {"1-0": inside}})))
    with pytest.raises(Exception, match=f"offset {inside} is inside a message; the message starts at {sent[3].offset}"):
        reader.load().collect()

    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"brokers": brokers_option(broker), "subscribe": "gone"}
    stream_to_parquet(spark, output, checkpoint, **options)
    assert spark.read.parquet(str(output)).count() == len(sent)
    more = produce(broker_list(broker), "gone", 600, first=40)
    broker.stop()
    broker.start()  # retention runs when the log is opened: the old segments go
    options["brokers"] = brokers_option(broker)
    earliest = earliest_offsets(broker.port, "gone", 1)[0]
    assert earliest > max(s.offset for s in sent)
    with pytest.raises(Exception, match=f"{DataLossError.__name__}: mpbroker source: offset .* of gone/1-0 is no longer in "
                                        "the log.*failOnDataLoss=false"):
        stream_to_parquet(spark, output, checkpoint, **options)
    stream_to_parquet(spark, output, checkpoint, failOnDataLoss="false", **options)
    kept = [s for s in more if s.offset >= earliest]
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(sent + kept)


@pytest.mark.timeout(900)
def test_a_driver_killed_mid_batch_and_run_again_leaves_every_message_exactly_once(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", brokerid=1, num_partitions=2)
    sent = produce(broker_list(broker), "killed", 1200)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [brokers_option(broker), "killed", output, checkpoint]
    driver = start_driver(*args, "--processing-time", "--max-bytes", 8000, log_path=tmp_path / "first.log")
    try:
        # Killed while a batch is planned (its end is in the checkpoint) but not committed.
        wait_for(lambda: driver.poll() is None and batch_files(checkpoint / "commits") >= 1
                 and batch_files(checkpoint / "offsets") > batch_files(checkpoint / "commits"), 300, 0.01,
                 "a micro-batch in flight after a committed one")
    finally:
        kill_group(driver)
    planned, committed = batch_files(checkpoint / "offsets"), batch_files(checkpoint / "commits")
    assert planned > committed, (planned, committed)
    more = produce(broker_list(broker), "killed", 200, first=1200)

    rerun = subprocess.run(driver_command(*args, "--available-now"), capture_output=True, text=True, cwd=REPO,
                           env=cli_env(), timeout=400)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert batch_files(checkpoint / "commits") > planned
    frame = spark.read.parquet(str(output))  # through the sink's log: files of uncommitted attempts are not data
    assert frame.count() == len(sent + more)
    assert rows_of(frame) == sent_rows(sent + more)


def batch_files(directory) -> int:
    return sum(1 for name in os.listdir(directory) if name.isdigit()) if os.path.isdir(directory) else 0


def driver_command(*args) -> list:
    return [sys.executable, "-m", "tests.spark_loader.stream_driver", *map(str, args)]


def start_driver(*args, log_path) -> subprocess.Popen:
    with open(log_path, "w") as log:
        return subprocess.Popen(driver_command(*args), stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=cli_env(),
                                start_new_session=True)


def test_a_broker_that_is_down_keeps_its_offsets_until_it_is_back(spark, broker_factory, tmp_path):
    one = broker_factory("b1", brokerid=1, num_partitions=1)
    two = broker_factory("b2", brokerid=2, num_partitions=1)
    sent = produce(broker_list(one, two), "spread", 100)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream_to_parquet(spark, output, checkpoint, brokers=brokers_option(one, two), subscribe="spread")
    two.stop()
    more = produce(broker_list(one), "spread", 40, first=100)
    stream_to_parquet(spark, output, checkpoint, brokers=f"{brokers_option(one)},2:{HOST}:{two.port}",
                      subscribe="spread")  # broker 2 unreachable: broker 1's news only, no error
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(sent + more)
    two.start()  # on another port; its partitions are known by broker id
    later = produce(broker_list(two), "spread", 30, first=140)
    stream_to_parquet(spark, output, checkpoint, brokers=brokers_option(one, two), subscribe="spread")
    assert spark.read.parquet(str(output)).count() == len(sent + more + later)
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(sent + more + later)


def test_a_streaming_query_takes_over_where_the_loader_stopped(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", brokerid=1, num_partitions=2)
    loaded = produce(broker_list(broker), "handover", 120)
    load(spark, tmp_path / "loaded", broker_list(broker), ["handover"])
    news = produce(broker_list(broker), "handover", 40, first=120)
    output = tmp_path / "out"
    stream_to_parquet(spark, output, tmp_path / "checkpoint", brokers=brokers_option(broker), subscribe="handover",
                      startingOffsets=source_starting_offsets(str(tmp_path / "loaded")))
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(news)
    assert loaded and spark.read.parquet(str(output)).count() == len(news)

    # startingOffsets latest: a new query reads only what comes after its start.
    output, checkpoint = tmp_path / "latest", tmp_path / "latest-checkpoint"
    options = {"brokers": brokers_option(broker), "subscribe": "handover", "startingOffsets": "latest"}
    assert sum(p["numInputRows"] for p in stream_to_parquet(spark, output, checkpoint, **options)) == 0
    after = produce(broker_list(broker), "handover", 25, first=160)
    stream_to_parquet(spark, output, checkpoint, **options)
    assert rows_of(spark.read.parquet(str(output))) == sent_rows(after)
