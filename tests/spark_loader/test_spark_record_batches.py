"""The Spark loader on a topic written by modern producers (record batches, produced
with confluent-kafka): every record's value loaded once as ``payload`` with the
record's own offset, and a second load taking only what came since. The schema has no
key or timestamp column, so only values are loaded."""

from mpbroker.clients import SimpleConsumer
from tests.clients.modern import produce_modern, records, wait_readable
from tests.spark_loader.loads import HOST, Sent, broker_list, load, read_output, read_state, spark

__all__ = ["spark"]  # the module-scoped SparkSession fixture


def test_spark_loader_loads_the_values_of_a_modern_topic_with_their_offsets(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", brokerid=1)
    first = records("spark", 400)
    produce_modern(broker, "modern", first, compression="zstd", partition=None)
    wait_readable(broker.port, "modern", len(first), range(4))
    output = tmp_path / "out"

    summary = load(spark, output, broker_list(broker), ["modern"])

    def expected():
        with SimpleConsumer(HOST, broker.port) as consumer:
            return {Sent("modern", 1, p, m.offset, m.payload) for p in range(4) for m in consumer.messages("modern", p, 0)}
    rows = [sent for sent, _ in read_output(output)]
    assert len(rows) == len(first) == summary["messages"]
    assert set(rows) == expected()
    assert sorted(s.payload for s in rows) == sorted(v for _, v, _ in first)
    with SimpleConsumer(HOST, broker.port) as consumer:
        assert read_state(output)["offsets"] == {f"modern/1-{p}": consumer.latest_offset("modern", p) for p in range(4)}

    more = records("later", 150)
    produce_modern(broker, "modern", more, compression="gzip", partition=None)
    wait_readable(broker.port, "modern", len(first) + len(more), range(4))
    second = load(spark, output, broker_list(broker), ["modern"])
    assert second["messages"] == len(more)
    rows = [sent for sent, _ in read_output(output)]
    assert len(rows) == len(first) + len(more) and set(rows) == expected()
