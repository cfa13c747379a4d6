"""The valid prefix of a run of stored record batches: what recovery keeps of a
record-batch log after a crash (``segments.record_format``).

Shallow, as for 0.7 messages: each batch's length must fit, its magic be 2 and its
CRC-32C match; the records inside are not walked (the CRC covers them, compressed or
not, and they were walked when the batch was produced). The first batch that fails
ends the valid prefix: a torn tail after a power cut."""

import struct

from mpbroker.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, MAGIC, MAGIC_OFFSET, MIN_BATCH_LENGTH
from mpbroker.records.crc import crc32c

_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")


def valid_batches_prefix(buffer) -> int:
    """How many leading bytes of ``buffer`` are whole, CRC-valid record batches."""
    view = memoryview(buffer)
    end = len(view)
    position = 0
    while end - position >= HEADER_SIZE:
        (length,) = _LENGTH.unpack_from(view, position + 8)
        following = position + 12 + length
        if length < MIN_BATCH_LENGTH or following > end or view[position + MAGIC_OFFSET] != MAGIC:
            break
        if crc32c(view[position + ATTRIBUTES_OFFSET:following]) != _CRC.unpack_from(view, position + CRC_OFFSET)[0]:
            break
        position = following
    return position
