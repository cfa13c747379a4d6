"""The limit of a Spark read of mpbroker data: the segment files themselves, read by a
PySpark Python data source (``mpbroker-segment-files``) with no broker in between.

Each Spark partition is one segment file (``<log.dir>/<topic>-<partition>/*.kafka``,
named by its base offset), read whole and decoded with ``decode_messages`` (the same
CRC-checked C decode the broker's consumers use), yielded as Arrow batches of 20,000 rows
(what one 4 MiB fetch of the source holds) in the schema of the ``mpbroker`` source (``mpbroker.spark_loader.source``): what the source
would hand Spark if the network, the broker and the fetches cost nothing. Benchmarks
only: a live broker's files are read as they are (its last segment may grow; what was
flushed before the read is what is read).
"""

import os

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from mpbroker.codec.message_set import decode_messages

NAME = "mpbroker-segment-files"
ARROW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                          ("timestampType", pa.int32()), ("broker", pa.int32())])
SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int, broker int")
SEGMENT_SUFFIX = ".kafka"
BATCH_ROWS = 20_000  # about what one 4 MiB fetch of 200-byte messages holds


class SegmentFile(InputPartition):
    def __init__(self, path: str, topic: str, partition: int, base_offset: int):
        super().__init__(path)
        self.path, self.topic, self.partition, self.base_offset = path, topic, partition, base_offset


def segment_files(log_dir: str, topic: str) -> list:
    """Every segment file of ``topic`` under ``log_dir``, in partition and offset order."""
    files = []
    for name in os.listdir(log_dir):
        head, _, number = name.rpartition("-")
        if head != topic or not number.isdigit():
            continue
        for segment in os.listdir(os.path.join(log_dir, name)):
            if segment.endswith(SEGMENT_SUFFIX):
                base = int(segment[:-len(SEGMENT_SUFFIX)])
                files.append(SegmentFile(os.path.join(log_dir, name, segment), topic, int(number), base))
    return sorted(files, key=lambda f: (f.partition, f.base_offset))


class SegmentFilesReader(DataSourceReader):
    def __init__(self, log_dir: str, topic: str, broker: int):
        self.log_dir, self.topic, self.broker = log_dir, topic, broker

    def partitions(self):
        return segment_files(self.log_dir, self.topic)

    def read(self, partition: SegmentFile):
        with open(partition.path, "rb") as f:
            data = f.read()
        payloads, next_offsets, _ = decode_messages(data, partition.base_offset)
        count = len(payloads)
        if not count:
            return
        starts = [partition.base_offset, *next_offsets[:-1]]
        for first in range(0, count, BATCH_ROWS):  # batches of the size the source's fetches make
            last = min(first + BATCH_ROWS, count)
            rows = last - first
            yield pa.RecordBatch.from_arrays([
                pa.nulls(rows, pa.binary()), pa.array(payloads[first:last], pa.binary()),
                pa.array([partition.topic] * rows, pa.string()), pa.array([partition.partition] * rows, pa.int32()),
                pa.array(starts[first:last], pa.int64()), pa.nulls(rows, pa.timestamp("us", tz="UTC")),
                pa.nulls(rows, pa.int32()), pa.array([self.broker] * rows, pa.int32()),
            ], schema=ARROW_SCHEMA)


class SegmentFilesSource(DataSource):
    """Options: ``path`` (the broker's log.dir), ``topic``, ``broker`` (its id)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return SPARK_SCHEMA

    def reader(self, schema):
        return SegmentFilesReader(self.options["path"], self.options["topic"], int(self.options.get("broker", 0)))
