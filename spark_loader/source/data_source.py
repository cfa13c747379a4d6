"""The ``mpbroker`` format of PySpark's Python Data Source API: the classes Spark
instantiates, wired to the planner (driver) and the partition reader (executors).

    from mpbroker.spark_loader import register_source
    register_source(spark)
    spark.readStream.format("mpbroker").option("zookeeper", "zk:2181/mpbroker") \\
        .option("subscribe", "page-views").load()

Where each piece runs: ``MPBrokerSource.schema`` / ``reader`` / ``streamReader`` and the
readers' ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` run in the
driver's Python data source worker (the planner talks to ZooKeeper and the brokers
there); ``read`` runs in the executors' Python workers on a pickled copy of the reader,
so each ``RangePartition`` carries everything a task needs (the range, the broker's
address, ZooKeeper for a leader change, the options), and the reader drops its driver
state (connections) when pickled.

Offsets are ``offsets.py``'s ``{topic: {node: byte offset}}``; Spark writes each
batch's end into the checkpoint before the batch runs and replays the same range after
a crash, and its file sinks commit each batch once: exactly once into files.
"""

import logging

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mpbroker.spark_loader.source.offsets import flatten, nest, normalized
from mpbroker.spark_loader.source.options import includes_headers, parse_options
from mpbroker.spark_loader.source.partition_reader import read_partition, spark_schema
from mpbroker.spark_loader.source.planner import Planner

log = logging.getLogger(__name__)

NAME = "mpbroker"


class RangePartition(InputPartition):
    """One Spark task: a PartitionRange and how to read it."""

    def __init__(self, part, include_headers: bool, fetch_size: int, fail_on_data_loss: bool):
        super().__init__(tuple(part))
        self.part = part
        self.include_headers = include_headers
        self.fetch_size = fetch_size
        self.fail_on_data_loss = fail_on_data_loss

    def read(self):
        return read_partition(self.part, include_headers=self.include_headers, fetch_size=self.fetch_size,
                              fail_on_data_loss=self.fail_on_data_loss)


class _PlannedReader:
    """What the batch and the stream reader share: the options, a planner on the driver
    (dropped when pickled for the executors), and the Spark partitions of a range."""

    def __init__(self, options):
        self.options = options
        self._planner = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def __getstate__(self):
        return {"options": self.options, "_planner": None}

    def _partitions(self, start: dict, end: dict, ends=None) -> list:
        options = self.options
        return [RangePartition(part, options.include_headers, options.fetch_size, options.fail_on_data_loss)
                for part in self.planner.ranges(start, end, ends)]

    def read(self, partition: RangePartition):
        return partition.read()


class MPBrokerBatchReader(_PlannedReader, DataSourceReader):
    """``spark.read``: from ``startingOffsets`` to ``endingOffsets`` (default: the log
    ends when the query is planned)."""

    def partitions(self):
        planner = self.planner
        try:
            ends = planner.log_ends()
            start = planner.starting_offsets(ends)
            end_given = self.options.ending
            end = {}
            for key, part in ends.items():
                wanted = flatten(end_given).get(key, -1) if isinstance(end_given, dict) else -1
                end[key] = part.end if wanted == -1 else planner.check_boundary(part, wanted)
            start_flat = flatten(start)
            backwards = sorted(f"{t}/{n}" for (t, n), offset in end.items() if offset < start_flat.get((t, n), 0))
            if backwards:
                raise ValueError(f"mpbroker source: endingOffsets is before startingOffsets for {', '.join(backwards)}")
            return self._partitions(start, nest(end), ends)
        finally:
            planner.close()


class MPBrokerStreamReader(_PlannedReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: each micro-batch reads from the previous end to the log ends
    of now (or as far as the read limit allows); with ``trigger(availableNow=True)`` to
    the log ends of the query's start, in as many batches as the limit makes."""

    def __init__(self, options):
        super().__init__(options)
        self._target = None  # availableNow: the log ends when the query started
        self._last_ends = None  # the LogEnds latestOffset found: partitions() plans the batch with them
        self._prepared = False  # availableNow: the first latestOffset takes the ends found when preparing

    def initialOffset(self) -> dict:
        return self.planner.starting_offsets()

    def getDefaultReadLimit(self):
        options = self.options
        if options.max_offsets_per_trigger:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.max_bytes_per_trigger:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._last_ends = self.planner.log_ends()
        self._target = flatten(self.planner.end_offsets({}, self._last_ends))
        self._prepared = True

    def latestOffset(self, start: dict, limit) -> dict:
        start = normalized(start)
        ends = self._last_ends if self._prepared else self.planner.log_ends()
        self._last_ends, self._prepared = ends, False
        if self._target is not None:  # nothing past the target: cap each log end there
            for key, part in list(ends.items()):
                if key in self._target:
                    ends[key] = part._replace(end=min(part.end, max(self._target[key], part.start)))
                else:  # appeared after the query started
                    ends[key] = part._replace(end=part.start)
        max_bytes = max_messages = 0
        if not isinstance(limit, ReadAllAvailable):
            max_bytes = getattr(limit, "max_bytes", 0) or self.options.max_bytes_per_trigger
            max_messages = getattr(limit, "max_rows", 0) or self.options.max_offsets_per_trigger
        return self.planner.end_offsets(start, ends, max_bytes, max_messages)

    def reportLatestOffset(self):
        return None

    def partitions(self, start: dict, end: dict):
        """The batch's tasks, planned with what ``latestOffset`` found a moment ago (the
        brokers' addresses and segment bases); a batch replayed after a restart, or one
        naming a partition not found then, discovers them anew."""
        return self._partitions(normalized(start), normalized(end), self._last_ends)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, and the broker keeps
        data by retention, not by what readers committed."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


class MPBrokerSource(DataSource):
    """Options: see ``mpbroker.spark_loader.source.options``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        return spark_schema(includes_headers(self.options))

    def reader(self, schema):
        return MPBrokerBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema):
        return MPBrokerStreamReader(parse_options(self.options, streaming=True))


def register_source(spark) -> None:
    """Make ``format("mpbroker")`` known to ``spark`` (a SparkSession)."""
    spark.dataSource.register(MPBrokerSource)
