"""Messages that carry the moment they were sent: a 200-byte payload that starts with
CLOCK_MONOTONIC in nanoseconds (one clock for every process of the machine)."""

import os
import struct
import time

from bench.paper.messages import MESSAGE_BYTES

_STAMP = struct.Struct(">q")
_FILLER = os.urandom(MESSAGE_BYTES - _STAMP.size)


def stamped_payload() -> bytes:
    return _STAMP.pack(time.monotonic_ns()) + _FILLER


def sent_at_ns(payload: bytes) -> int:
    return _STAMP.unpack_from(payload)[0]
