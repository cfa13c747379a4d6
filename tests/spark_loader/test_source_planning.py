"""The stream reader's planning on the driver, without Spark: how often a micro-batch asks
the brokers for their partitions and log ends (each time a ZooKeeper read, or a connection
to every broker of the list), against a real broker."""

from pyspark.sql.streaming.datasource import ReadAllAvailable

from mpbroker.spark_loader.source.data_source import MPBrokerStreamReader
from mpbroker.spark_loader.source.options import parse_options
from tests.spark_loader.loads import broker_list, produce


def counted(reader: MPBrokerStreamReader) -> list:
    """Count the planner's log-end readings (discovery and a log end per partition)."""
    planner, calls = reader.planner, []
    log_ends = planner.log_ends

    def counting():
        calls.append(1)
        return log_ends()
    planner.log_ends = counting
    return calls


def test_a_micro_batch_reads_the_log_ends_once(broker_factory):
    broker = broker_factory("b1", brokerid=1, num_partitions=2)
    brokers = broker_list(broker)
    sent = produce(brokers, "planned", 40)
    reader = MPBrokerStreamReader(parse_options({"brokers": brokers, "subscribe": "planned",
                                                 "startingOffsets": "earliest"}, streaming=True))
    try:
        start = reader.initialOffset()
        calls = counted(reader)
        end = reader.latestOffset(start, ReadAllAvailable())
        tasks = reader.partitions(start, end)
        assert len(calls) == 1  # latestOffset's; partitions() plans with what it found
        assert {task.part.partition for task in tasks} == {message.partition for message in sent}

        produce(brokers, "planned", 20, first=40)
        start, calls[:] = end, []
        end = reader.latestOffset(start, ReadAllAvailable())
        reader.partitions(start, end)
        assert len(calls) == 1

        # a batch replayed after a restart (no latestOffset before it) finds them anew
        replaying = MPBrokerStreamReader(reader.options)
        calls = counted(replaying)
        assert [t.part for t in replaying.partitions(start, end)] == [t.part for t in reader.partitions(start, end)]
        assert len(calls) == 1
        replaying.stop()
    finally:
        reader.stop()


def test_an_available_now_query_reads_the_log_ends_once_to_start(broker_factory):
    broker = broker_factory("b1", brokerid=1)
    brokers = broker_list(broker)
    produce(brokers, "now", 30)
    reader = MPBrokerStreamReader(parse_options({"brokers": brokers, "subscribe": "now",
                                                 "startingOffsets": "earliest"}, streaming=True))
    try:
        start = reader.initialOffset()
        calls = counted(reader)
        reader.prepareForTriggerAvailableNow()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert reader.partitions(start, end)
        assert len(calls) == 1  # prepared, the first batch planned and its tasks made on one reading
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # the target reached
        assert len(calls) == 2
    finally:
        reader.stop()
