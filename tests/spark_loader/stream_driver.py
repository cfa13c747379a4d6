"""A streaming query over the ``mpbroker`` source into Parquet, as a program of its own,
for the tests that SIGKILL a Spark driver mid-batch and run it again.

    python -m tests.spark_loader.stream_driver BROKERS TOPIC OUTPUT CHECKPOINT \\
        (--available-now | --processing-time) [--max-bytes N]

``--processing-time`` runs micro-batches back to back until killed; ``--available-now``
reads to the log ends of its start and exits 0."""

import argparse

from mpbroker.cli.spark_load import spark_session
from mpbroker.spark_loader import register_source


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("brokers")
    parser.add_argument("topic")
    parser.add_argument("output")
    parser.add_argument("checkpoint")
    trigger = parser.add_mutually_exclusive_group(required=True)
    trigger.add_argument("--available-now", action="store_true")
    trigger.add_argument("--processing-time", action="store_true")
    parser.add_argument("--max-bytes", type=int, default=0)
    args = parser.parse_args()
    spark = spark_session("local[2]", "mpbroker-stream-driver")
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    reader = spark.readStream.format("mpbroker").option("brokers", args.brokers).option("subscribe", args.topic)
    if args.max_bytes:
        reader = reader.option("maxBytesPerTrigger", args.max_bytes)
    writer = (reader.load().writeStream.format("parquet").option("path", args.output)
              .option("checkpointLocation", args.checkpoint))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="0 seconds")
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
