"""The ``mpbroker`` Spark source into Parquet, next to its limit and the loader, on the
same data in one run.

    python -m bench.spark_source_bench [--messages 10000000] [--partitions 4] [--rounds 3]

One broker is filled with N 200-byte messages over 4 partitions (``broker_bench``'s
raw-wire producer) before any clock starts; then, ``--rounds`` times, interleaved, each
into a fresh output directory on ``local[2]`` (the Spark session already up):
- **source, streaming**: ``readStream.format("mpbroker")`` -> Parquet file sink with a
  checkpoint, ``trigger(availableNow=True)``: what a scheduled incremental load is;
- **source, batch**: ``spark.read.format("mpbroker")`` -> ``write.parquet``;
- **limit**: the same segment files read by Spark directly (``spark_segment_files``: a
  Python data source that reads and decodes each ``.kafka`` file, no broker, no
  network) -> ``write.parquet``: the issue's "limit";
- **loader**: ``mpbroker-spark-load``'s ``run_load`` (tasks read over the wire and write
  Parquet with pyarrow themselves);
- the source and the limit into Spark's ``noop`` sink: where the time goes (getting the
  rows into the JVM, against writing Parquet there).
The table gives the median rows/s of the rounds and each row's ratio to the limit and
to the loader (targets: source >= 0.8x the limit, and no slower than the loader).
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time

from bench.common import RESULTS_DIR, print_table, write_results
from bench.spark_bench import filled_broker
from bench.spark_segment_files import SegmentFilesSource
from mpbroker.cli.spark_load import spark_session
from mpbroker.spark_loader import register_source
from mpbroker.spark_loader.job import LoadOptions, run_load

TOPIC = "sourcebench"
MESSAGE_BYTES = 200


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (JIT, workers)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=None, help="where the broker and the outputs live (default: /tmp)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where the table and JSON go")
    args = parser.parse_args()
    data = {"messages": args.messages, "partitions": args.partitions, "master": args.master, "rounds": args.rounds}
    with filled_broker(args.dir, args.partitions, args.messages, TOPIC) as (broker, log_bytes):
        brokers = f"0:127.0.0.1:{broker.port}"
        spark = spark_session(args.master)
        spark.sparkContext.setLogLevel("ERROR")
        register_source(spark)
        spark.dataSource.register(SegmentFilesSource)
        work = tempfile.mkdtemp(prefix="mpbroker-spark-source-bench-", dir=args.dir)

        def source():
            return spark.read.format("mpbroker").option("brokers", brokers).option("subscribe", TOPIC).load()

        def limit():
            return (spark.read.format("mpbroker-segment-files").option("path", broker.log_dir)
                    .option("topic", TOPIC).load())

        def streaming(output):
            query = (spark.readStream.format("mpbroker").option("brokers", brokers).option("subscribe", TOPIC).load()
                     .writeStream.format("parquet").option("path", output)
                     .option("checkpointLocation", output + ".checkpoint").trigger(availableNow=True).start())
            query.awaitTermination()
            assert query.exception() is None, query.exception()

        def loader(output):
            summary = run_load(spark, LoadOptions(output=output, topics=[TOPIC], broker_list=brokers))
            assert summary["messages"] == args.messages, summary["messages"]

        runs = {
            "source, streaming availableNow -> Parquet": streaming,
            "source, batch read -> Parquet": lambda output: source().write.parquet(output),
            "limit: segment files read by Spark -> Parquet": lambda output: limit().write.parquet(output),
            "loader (run_load: tasks write Parquet with pyarrow)": loader,
            "source -> noop sink": lambda output: source().write.format("noop").mode("overwrite").save(),
            "limit -> noop sink": lambda output: limit().write.format("noop").mode("overwrite").save(),
        }
        seconds = {name: [] for name in runs}
        try:
            for round_number in range(-args.warmup, args.rounds):
                for index, (name, run) in enumerate(runs.items()):
                    output = os.path.join(work, f"{round_number}-{index}")
                    took = timed(lambda: run(output))
                    if round_number >= 0:
                        seconds[name].append(took)
                    if os.path.isdir(output) and "noop" not in name and "loader" not in name:
                        assert spark.read.parquet(output).count() == args.messages, name
                    shutil.rmtree(output, ignore_errors=True)
                    shutil.rmtree(output + ".checkpoint", ignore_errors=True)
                if round_number >= 0:
                    print(f"round {round_number + 1}: " + ", ".join(f"{s[-1]:.1f}s" for s in seconds.values()),
                          flush=True)
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
    rates = {name: args.messages / statistics.median(values) for name, values in seconds.items()}
    limit_rate = rates["limit: segment files read by Spark -> Parquet"]
    loader_rate = rates["loader (run_load: tasks write Parquet with pyarrow)"]
    rows = [[name, f"{rate:,.0f}", f"{rate / limit_rate:.2f}x", f"{rate / loader_rate:.2f}x",
             " ".join(f"{s:.1f}" for s in seconds[name])] for name, rate in rates.items()]
    data.update(seconds=seconds, rows_per_s={name: round(rate) for name, rate in rates.items()}, log_bytes=log_bytes)
    table = print_table(f"The mpbroker Spark source: {args.messages:,} messages of {MESSAGE_BYTES} bytes over "
                        f"{args.partitions} partitions, {args.master}, median of {args.rounds} interleaved rounds",
                        ["what", "rows/s", "vs limit", "vs loader", "seconds per round"], rows)
    write_results("spark_source", table, data, args.results_dir)


if __name__ == "__main__":
    main()
