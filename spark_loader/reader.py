"""Reading one PartitionRange as Arrow record batches: what each Spark task runs, and
what the benchmark times without Spark.

Fetches of ``fetch_size`` bytes, decoded in bulk (``SimpleConsumer.message_sets``:
one CRC check per message, nested compressed sets inflated), cut at the range's end;
each answer becomes one record batch of ``broker``, ``partition``, ``offset`` (where
the message starts; the messages inside a compressed wrapper share the wrapper's) and
``payload``. The range's end is a message boundary (a log end), except when it was
capped by ``--max-bytes-per-partition``: then reading stops at the last whole message
before the cap, and ``ReadStats.next_offset`` says where the next load starts.
"""

from typing import NamedTuple

import pyarrow as pa

from clients.consumer import SimpleConsumer

SCHEMA = pa.schema([("broker", pa.int32()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("payload", pa.binary())])


class ReadStats(NamedTuple):
    messages: int
    payload_bytes: int
    next_offset: int  # where the next load of this partition starts


def read_batches(part, fetch_size: int = 4 * 1024 * 1024, stats: list | None = None):
    """Yield pyarrow RecordBatches of ``part`` (a PartitionRange); append its ReadStats
    to ``stats`` when done."""
    offset = part.start
    messages = payload_bytes = 0
    if part.start < part.end:
        consumer = SimpleConsumer(part.host, part.port, fetch_size=fetch_size,
                                  max_fetch_size=max(fetch_size, 64 * 1024 * 1024))
        try:
            for message_set in consumer.message_sets(part.topic, part.partition, part.start):
                payloads, next_offsets = message_set.payloads, message_set.next_offsets
                if next_offsets[-1] > part.end:
                    keep = _count_before(next_offsets, part.end)
                    payloads, next_offsets = payloads[:keep], next_offsets[:keep]
                if payloads:
                    starts = [offset]
                    starts += next_offsets[:-1]
                    count = len(payloads)
                    yield pa.RecordBatch.from_arrays([
                        pa.array([part.broker_id] * count, pa.int32()),
                        pa.array([part.partition] * count, pa.int32()),
                        pa.array(starts, pa.int64()),
                        pa.array(payloads, pa.binary()),
                    ], schema=SCHEMA)
                    messages += count
                    payload_bytes += sum(map(len, payloads))
                    offset = next_offsets[-1]
                if offset >= part.end or len(payloads) < len(message_set.payloads):
                    break
        finally:
            consumer.close()
    if stats is not None:
        stats.append(ReadStats(messages, payload_bytes, offset))


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
