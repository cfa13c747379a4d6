"""The executors' half of the ``mpbroker`` Spark source: one planned range of one
partition read as Arrow record batches in the schema of Spark's Kafka source.

The read is ``reader.read_range``'s (the loader's): fetches of ``fetchSize`` bytes,
decoded in bulk with one CRC check per message, compressed sets unpacked, cut at the
range's end (always a message boundary the driver chose), a replicated partition
followed to its new leader. Each fetch answer becomes one record batch, so the rows
reach Spark without a Python loop per message:

    key, value, topic, partition, offset, timestamp, timestampType, [headers,] broker

A 0.7 message has no key, timestamp or headers (null, null, null, ``[]``); a record
that a modern client wrote has its key, headers and timestamp (``timestampType`` 0,
create time). ``offset`` is where the message starts (the records of a batch: their
own offsets; the messages of a compressed 0.7 set: the set's start) and ``broker`` the
0.7 broker whose partition it is (-1 for a replicated topic's partition).

The range is the same on every attempt of a task (the driver fixed it in Spark's
checkpoint before the batch ran), so a retried or replayed task yields the same rows:
what makes the query's output exactly once. If the log no longer holds the range's
start when the task runs (retention won the race), the task fails with DataLossError,
or with ``failOnDataLoss=false`` reads what is left of the range.
"""

import logging

import pyarrow as pa
import pyarrow.compute as pc

from mpbroker.codec.errors import OffsetOutOfRangeError
from mpbroker.spark_loader.reader import read_range
from mpbroker.spark_loader.source.offsets import DataLossError

log = logging.getLogger(__name__)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_COLUMNS = [("key", pa.binary(), "binary"), ("value", pa.binary(), "binary"), ("topic", pa.string(), "string"),
            ("partition", pa.int32(), "int"), ("offset", pa.int64(), "long"),
            ("timestamp", TIMESTAMP_TYPE, "timestamp"), ("timestampType", pa.int32(), "int")]
_HEADERS = ("headers", HEADER_TYPE, "array<struct<key: string, value: binary>>")
_BROKER = ("broker", pa.int32(), "int")


def columns(include_headers: bool) -> list:
    return [*_COLUMNS, *([_HEADERS] if include_headers else []), _BROKER]


def spark_schema(include_headers: bool) -> str:
    """The source's schema as Spark's DDL."""
    return ", ".join(f"{name} {ddl}" for name, _, ddl in columns(include_headers))


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema([(name, kind) for name, kind, _ in columns(include_headers)])


def read_partition(part, *, include_headers: bool, fetch_size: int, fail_on_data_loss: bool):
    """Yield the record batches of ``part`` (a PartitionRange)."""
    schema = arrow_schema(include_headers)
    try:
        for message_set, count in read_range(part, fetch_size):
            yield _batch(part, message_set, count, schema, include_headers)
    except OffsetOutOfRangeError as exc:
        log_start = getattr(exc, "log_start", None)
        what = (f"{part.topic} partition {part.partition} (broker {part.broker_id}): offsets {part.start}..{part.end} "
                f"were planned, but the log no longer holds them ({exc})")
        if fail_on_data_loss or log_start is None or log_start <= part.start:
            raise DataLossError(f"mpbroker source: {what}. Set failOnDataLoss=false to read on from what is "
                                "left") from None
        log.warning("mpbroker source: %s; reading %d..%d (failOnDataLoss=false)", what, log_start, part.end)
        if log_start < part.end:
            yield from read_partition(part._replace(start=log_start), include_headers=include_headers,
                                      fetch_size=fetch_size, fail_on_data_loss=True)


def _batch(part, message_set, count: int, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    values = pa.array(message_set.payloads[:count] if count < len(message_set.payloads) else message_set.payloads,
                      pa.binary())
    if message_set.record_batches:
        keys = pa.array(message_set.keys[:count], pa.binary())
        millis = pa.array(message_set.timestamps[:count], pa.int64())
        known = pc.greater_equal(millis, 0)
        timestamps = pc.if_else(known, millis, None).cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP_TYPE)
        types = pc.if_else(known, pa.scalar(0, pa.int32()), pa.scalar(None, pa.int32()))
        headers = pa.array([[{"key": k, "value": v} for k, v in record] for record in message_set.headers[:count]],
                           HEADER_TYPE) if include_headers else None
    else:
        keys = pa.nulls(count, pa.binary())
        timestamps = pa.nulls(count, TIMESTAMP_TYPE)
        types = pa.nulls(count, pa.int32())
        headers = pa.array([[]] * count, HEADER_TYPE) if include_headers else None
    arrays = [keys, values, pa.array([part.topic] * count, pa.string()), pa.array([part.partition] * count, pa.int32()),
              pa.array(message_set.offsets[:count], pa.int64()), timestamps, types]
    if include_headers:
        arrays.append(headers)
    arrays.append(pa.array([part.broker_id] * count, pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
