"""The Spark loader end to end: load N 200-byte messages (default 10 million) spread
over 4 partitions into Parquet on ``local[2]``, next to reading the same segment
files directly.

    python -m bench.spark_bench [--messages 10000000] [--partitions 4] [--master local[2]]

The broker is filled with the raw-wire producer of ``broker_bench`` (batches of 50,
acknowledged once flushed) before the clock starts. Rows:
- ``mpbroker-spark-load``: ``run_load`` (plan, one Spark task per partition reading
  over the wire with ``sendfile`` fetches, CRC checks, Arrow batches, Parquet write,
  commit), Spark session already up;
- the loader's reader alone, without Spark (one process, partitions in turn);
- the segment files read directly (plain ``read`` of every ``.kafka`` file), and read
  plus decoded with ``decode_messages`` (the CRC-checked decode the tasks do).
Target: >= 500,000 messages/s end to end. The producer repeats one batch of 50
distinct payloads, so the Parquet size (printed) says little about real data.
"""

import argparse
import contextlib
import os
import tempfile
import time

from bench.broker_bench import produce, wait_flushed
from bench.broker_process import BenchBroker
from bench.common import print_table, write_results
from mpbroker.cli.spark_load import spark_session
from mpbroker.codec.message_set import decode_messages
from mpbroker.spark_loader.job import LoadOptions, run_load
from mpbroker.spark_loader.plan import discover, make_plan
from mpbroker.spark_loader.reader import read_batches

TOPIC = "loadbench"
MESSAGE_BYTES = 200


def segment_files(log_dir: str) -> list:
    return sorted(os.path.join(root, name) for root, _, names in os.walk(log_dir)
                  for name in names if name.endswith(".kafka") and os.path.basename(root).startswith(TOPIC + "-"))


def read_files(paths, decode: bool) -> tuple:
    messages = size = 0
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        size += len(data)
        if decode:
            messages += len(decode_messages(data)[0])
    return messages, size, time.perf_counter() - started


@contextlib.contextmanager
def filled_broker(directory, partitions: int, messages: int, topic: str = TOPIC):
    """A BenchBroker whose ``topic`` holds ``messages`` of 200 bytes over ``partitions``
    (the raw-wire producer, batches of 50), all flushed before any clock starts; yields the
    broker and the bytes of its log."""
    with BenchBroker(directory, num_partitions=partitions, num_workers=2, log_flush_interval=100000,
                     log_default_flush_interval_ms=200, log_file_size=512 * 1024 * 1024) as broker:
        produced = produce(broker.port, topic, partitions, messages, 50, True)
        wait_flushed(broker, topic)
        log_bytes = sum(p["log_end"] for p in broker.status()["partitions"] if p["topic"] == topic)
        print(f"produced {messages:,} messages ({log_bytes / 1e6:.0f} MB of log) in {produced:.1f}s", flush=True)
        yield broker, log_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=None, help="where the broker and the output live (default: /tmp)")
    args = parser.parse_args()
    rows, data = [], {"messages": args.messages, "partitions": args.partitions, "master": args.master}
    with filled_broker(args.dir, args.partitions, args.messages) as (broker, log_bytes):
        spark = spark_session(args.master)
        with tempfile.TemporaryDirectory(prefix="mpbroker-spark-bench-", dir=args.dir) as output:
            summary = run_load(spark, LoadOptions(output=output, topics=[TOPIC],
                                                  broker_list=f"0:127.0.0.1:{broker.port}"))
            assert summary["messages"] == args.messages, summary["messages"]
            parquet_bytes = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(output)
                                for name in names if name.endswith(".parquet"))
        spark.stop()
        seconds = summary["duration_s"]
        rows.append(["mpbroker-spark-load (run_load)", f"{args.messages / seconds:,.0f}",
                     f"{log_bytes / seconds / 1e6:,.1f}", f"{seconds:.1f}"])
        data["load"] = {"seconds": seconds, "parquet_bytes": parquet_bytes, "log_bytes": log_bytes}

        source = discover(broker_list=f"0:127.0.0.1:{broker.port}", topics=[TOPIC])
        started = time.perf_counter()
        count = sum(batch.num_rows for part in make_plan(source, {}) for batch in read_batches(part))
        seconds = time.perf_counter() - started
        assert count == args.messages, count
        rows.append(["reader alone, no Spark (1 process)", f"{count / seconds:,.0f}",
                     f"{log_bytes / seconds / 1e6:,.1f}", f"{seconds:.1f}"])

        paths = segment_files(broker.log_dir)
        _, size, seconds = read_files(paths, decode=False)
        rows.append(["segment files, plain read", f"{args.messages / seconds:,.0f}", f"{size / seconds / 1e6:,.1f}",
                     f"{seconds:.1f}"])
        count, size, seconds = read_files(paths, decode=True)
        assert count == args.messages, count
        rows.append(["segment files, read + decode_messages", f"{count / seconds:,.0f}",
                     f"{size / seconds / 1e6:,.1f}", f"{seconds:.1f}"])
    data["rows"] = rows
    table = print_table(f"Spark loader: {args.messages:,} messages of {MESSAGE_BYTES} bytes over {args.partitions} "
                        f"partitions, {args.master}; Parquet {parquet_bytes / 1e6:,.0f} MB",
                        ["what", "messages/s", "MB/s of log", "seconds"], rows)
    write_results("spark_loader", table, data)


if __name__ == "__main__":
    main()
