"""Batches built by hand and by kafka-python (an independent encoder), for the record tests."""

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

from mpbroker.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER
from mpbroker.records.crc import crc32c
from mpbroker.records.records import encode_varint

FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
          "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records")


def kafka_python_batch(records, codec=0, *, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       transactional=False) -> bytes:
    """A batch of ``(key, value, headers, timestamp)`` built by kafka-python's builder."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, producer_epoch, base_sequence,
                                        batch_size=1 << 30)
    for offset, (key, value, headers, timestamp) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, list(headers)) is not None
    return bytes(builder.build())


def fix_crc(batch) -> bytes:
    """``batch`` (one) with its CRC recomputed."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def with_header(batch, **changes) -> bytes:
    """``batch`` with header fields changed (by name, as in FIELDS) and its CRC recomputed
    (unless ``crc`` is one of the changes)."""
    fields = dict(zip(FIELDS, HEADER.unpack_from(batch)))
    fields.update(changes)
    out = HEADER.pack(*(fields[name] for name in FIELDS)) + bytes(batch[HEADER.size:])
    return out if "crc" in changes else fix_crc(out)


def raw_record(offset_delta=0, key=None, value=b"v", headers=(), timestamp_delta=0, attributes=0) -> bytes:
    """One record as bytes, any field as given (to build bad ones)."""
    body = bytes([attributes]) + encode_varint(timestamp_delta) + encode_varint(offset_delta)
    body += b"\x01" if key is None else encode_varint(len(key)) + key
    body += b"\x01" if value is None else encode_varint(len(value)) + value
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        body += encode_varint(len(header_key)) + header_key
        body += b"\x01" if header_value is None else encode_varint(len(header_value)) + header_value
    return encode_varint(len(body)) + body
