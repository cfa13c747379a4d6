"""Reading one PartitionRange as Arrow record batches, and writing them as one Parquet
file: what each Spark task runs (and what the benchmark times without Spark).

Fetches of ``fetch_size`` bytes, decoded in bulk (``SimpleConsumer.message_sets``:
one CRC check per message, nested compressed sets inflated), cut at the range's end;
each answer becomes one record batch of ``broker``, ``partition``, ``offset`` (where
the message starts; the messages inside a compressed wrapper share the wrapper's) and
``payload``. A partition that modern producers wrote (record batches) loads the same
way: a record's value is the ``payload`` and its ``offset`` the record's own (keys,
headers and timestamps have no column and are not loaded). The range's end is a message boundary (a log end), except when it was
capped by ``--max-bytes-per-partition``: then reading stops at the last whole message
before the cap, and ``ReadStats.next_offset`` says where the next load starts.

A replicated topic's range (``broker`` -1 in the rows) is read from the leader the plan
named; when that broker no longer leads the partition (NOT_LEADER) or cannot be
reached, the new leader is looked up in ZooKeeper (``LeaderConsumer``) and the read
goes on from the next offset there.
"""

import os
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.core.errors import BrokerUnavailableError
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.codec.errors import NotLeaderError

ROW_GROUP_BYTES = 64 * 1024 * 1024
SCHEMA = pa.schema([("broker", pa.int32()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("payload", pa.binary())])


class ReadStats(NamedTuple):
    messages: int
    payload_bytes: int
    next_offset: int  # where the next load of this partition starts


def read_batches(part, fetch_size: int = 4 * 1024 * 1024, stats: list | None = None):
    """Yield pyarrow RecordBatches of ``part`` (a PartitionRange); append its ReadStats
    to ``stats`` when done."""
    for message_set, count in read_range(part, fetch_size, stats):
        yield pa.RecordBatch.from_arrays([
            pa.array([part.broker_id] * count, pa.int32()),
            pa.array([part.partition] * count, pa.int32()),
            pa.array(message_set.offsets[:count], pa.int64()),
            pa.array(message_set.payloads[:count], pa.binary()),
        ], schema=SCHEMA)


def read_range(part, fetch_size: int = 4 * 1024 * 1024, stats: list | None = None):
    """Yield ``(message_set, count)`` for each fetch answer of ``part`` (a PartitionRange)
    holding messages inside the range: its first ``count`` messages are the range's. The
    loader's and the streaming source's batches are built from these. Appends the
    ReadStats to ``stats`` when done."""
    offset = part.start
    messages = payload_bytes = 0
    if part.start < part.end:
        message_sets = _message_sets(part, fetch_size)
        try:
            for message_set in message_sets:
                payloads, next_offsets = message_set.payloads, message_set.next_offsets
                count = len(payloads)
                if next_offsets[-1] > part.end:
                    count = _count_before(next_offsets, part.end)
                    # a compressed wrapper cut by the cap is left whole to the next load: the
                    # messages of a wrapper but its last report the wrapper's start (= their own)
                    while count and next_offsets[count - 1] == (next_offsets[count - 2] if count > 1 else offset):
                        count -= 1
                if count:
                    yield message_set, count
                    messages += count
                    payload_bytes += sum(map(len, payloads[:count]))
                    offset = next_offsets[count - 1]
                if offset >= part.end or count < len(payloads):
                    break
        finally:
            message_sets.close()
    if stats is not None:
        stats.append(ReadStats(messages, payload_bytes, offset))


def _message_sets(part, fetch_size: int):
    """``SimpleConsumer.message_sets`` of ``part`` from its broker; a replicated
    partition's read goes on at its new leader if that broker stops leading it."""
    options = {"fetch_size": fetch_size, "max_fetch_size": max(fetch_size, 64 * 1024 * 1024)}
    offset = part.start
    consumer = SimpleConsumer(part.host, part.port, **options)
    try:
        for message_set in consumer.message_sets(part.topic, part.partition, offset):
            offset = message_set.next_offset
            yield message_set
        return
    except (NotLeaderError, BrokerUnavailableError):
        if part.broker_id != REPLICATED or not part.zookeeper:
            raise
    finally:
        consumer.close()
    with LeaderConsumer(part.zookeeper, **options) as leaders:
        yield from leaders.message_sets(part.topic, part.partition, offset)


def _count_before(next_offsets: list, end: int) -> int:
    """How many leading messages end at or before ``end`` (next_offsets is sorted)."""
    low, high = 0, len(next_offsets)
    while low < high:
        middle = (low + high) // 2
        if next_offsets[middle] <= end:
            low = middle + 1
        else:
            high = middle
    return low


def write_partition_file(part, directory: str, name: str, fetch_size: int, stats: list):
    """Read ``part`` into one Parquet file ``directory/name`` (snappy, no dictionary:
    payloads rarely repeat; row groups of about 64 MB) and fsync it; returns its path,
    or None when the range held no message. ``stats`` gets the ReadStats."""
    path = os.path.join(directory, name)
    writer = None
    pending, pending_bytes = [], 0
    try:
        for batch in read_batches(part, fetch_size, stats):
            pending.append(batch)
            pending_bytes += batch.nbytes
            if pending_bytes >= ROW_GROUP_BYTES:
                writer = writer or _open_writer(path)
                writer.write_table(pa.Table.from_batches(pending, SCHEMA))
                pending, pending_bytes = [], 0
        if pending:
            writer = writer or _open_writer(path)
            writer.write_table(pa.Table.from_batches(pending, SCHEMA))
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return path


def _open_writer(path: str):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return pq.ParquetWriter(path, SCHEMA, compression="snappy", use_dictionary=False)
