"""Record batches (magic 2), the modern Kafka protocol's unit of data, sans-IO.

- ``batch``: the header, ``validate_batches`` (a produce's batches, refused with Kafka's
  error codes), ``stamp_batch`` (the broker's base offset, leader epoch and
  LogAppendTime, in place), ``reencode_uncompressed``;
- ``records``: ``iter_records`` (every record of a fetch answer) and ``encode_batch``;
- ``legacy``: 0.7 messages of the log as batches, their offsets from byte positions;
- ``compression``, ``crc``, ``errors``: the five codecs with bounded inflation, CRC-32C,
  the error codes and ``RecordBatchError``.

It sits between the codec (which it uses to read 0.7 messages and for gzip and snappy)
and the log (which stores batches at positions that give their offsets); like the codec
it touches no socket, file, process or thread.
"""

from mpbroker.records.batch import (
    BatchHeader,
    BatchInfo,
    read_header,
    reencode_uncompressed,
    stamp_batch,
    validate_batches,
)
from mpbroker.records.errors import RecordBatchError
from mpbroker.records.legacy import LegacyConversion, legacy_to_batches
from mpbroker.records.records import Record, encode_batch, iter_records

__all__ = [
    "BatchHeader",
    "BatchInfo",
    "LegacyConversion",
    "Record",
    "RecordBatchError",
    "encode_batch",
    "iter_records",
    "legacy_to_batches",
    "read_header",
    "reencode_uncompressed",
    "stamp_batch",
    "validate_batches",
]
