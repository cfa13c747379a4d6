"""The audit envelope: a small binary header a producer puts in front of a message's
opaque payload (``audit.envelope=true``) so that whoever reads the message later
knows when and where it was made. No I/O here: producers, consumers, the mirror and
``mpbroker-audit`` all wrap and open envelopes with these functions.

Format, version 1 (integers big-endian, as on the wire; strings are
``[uint8 length][UTF-8 bytes]``):

    offset  size  field
    0       4     magic: 0xFE 0x41 0x55 0x44 ("\\xfeAUD")
    4       1     version: 1
    5       8     created_ms: int64, milliseconds since the epoch when the producer
                  stamped the message (``send`` was called)
    13      8     sequence: int64, the producer's message counter (0, 1, 2, ...)
    21      1+h   host: the producing machine's name (1-255 bytes)
    22+h    1+c   client: the producer's id on that host, ``<pid>-<6 hex>`` (1-255 bytes)
    23+h+c  ...   payload: the application's bytes, unchanged, to the end of the message

(host, client, sequence) names one message of one producer: a reader that sees the
same triple twice has a duplicate (a mirror restarted after a kill redelivers), which
is how ``mpbroker-audit`` counts every message once.

Reading: a message that does not start with the magic is not enveloped and passes
through untouched (``open_envelope`` returns None, ``strip`` returns it as it is). The
first byte 0xFE never starts UTF-8 text or JSON, so text payloads cannot be mistaken
for an envelope. A message that starts with the magic but is shorter than its header
says, or has another version, raises EnvelopeError: it was damaged, or written by a
newer producer, and silently handing out its header as payload would be wrong.
"""

import struct
from typing import NamedTuple

MAGIC = b"\xfeAUD"
VERSION = 1
_FIXED = struct.Struct(">4sBqq")  # magic, version, created_ms, sequence
FIXED_SIZE = _FIXED.size  # 21
_CREATED = struct.Struct(">q")
_CREATED_AT = 5
MAX_NAME_BYTES = 255


class EnvelopeError(ValueError):
    """A message that starts with the envelope's magic but is not a whole version-1 envelope."""


class Envelope(NamedTuple):
    created_ms: int
    sequence: int
    host: str
    client: str
    payload: bytes


def _name(value: str, what: str) -> bytes:
    data = value.encode("utf-8")
    if not 0 < len(data) <= MAX_NAME_BYTES:
        raise ValueError(f"the envelope's {what} must be 1-{MAX_NAME_BYTES} bytes of UTF-8, not {len(data)}")
    return bytes((len(data),)) + data


def stamper(host: str, client: str):
    """A function ``stamp(payload, created_ms, sequence) -> enveloped bytes`` for one
    producer (its host and client encoded once)."""
    names = _name(host, "host") + _name(client, "client")
    pack = _FIXED.pack

    def stamp(payload: bytes, created_ms: int, sequence: int) -> bytes:
        return pack(MAGIC, VERSION, created_ms, sequence) + names + payload
    return stamp


def wrap(payload: bytes, created_ms: int, sequence: int, host: str, client: str) -> bytes:
    return stamper(host, client)(payload, created_ms, sequence)


def is_enveloped(data) -> bool:
    return data[:4] == MAGIC


def open_envelope(data: bytes) -> Envelope | None:
    """The envelope of ``data``, or None when ``data`` is not enveloped (no magic).
    EnvelopeError when it has the magic but is truncated or of another version."""
    if data[:4] != MAGIC:
        return None
    if len(data) < FIXED_SIZE:
        raise EnvelopeError(f"truncated audit envelope: {len(data)} bytes, its fixed header alone takes "
                            f"{FIXED_SIZE}")
    _, version, created_ms, sequence = _FIXED.unpack_from(data)
    if version != VERSION:
        raise EnvelopeError(f"audit envelope version {version} is not supported (this client reads {VERSION})")
    position = FIXED_SIZE
    names = []
    for what in ("host", "client"):
        if position >= len(data):
            raise EnvelopeError(f"truncated audit envelope: it ends before the {what}'s length")
        length = data[position]
        end = position + 1 + length
        if length == 0:
            raise EnvelopeError(f"bad audit envelope: its {what} is empty")
        if end > len(data):
            raise EnvelopeError(f"truncated audit envelope: the {what} ({length} bytes) runs past the end "
                                f"of the {len(data)}-byte message")
        try:
            names.append(bytes(data[position + 1:end]).decode("utf-8"))
        except UnicodeDecodeError:
            raise EnvelopeError(f"the {what} of an audit envelope is not UTF-8") from None
        position = end
    return Envelope(created_ms, sequence, names[0], names[1], bytes(data[position:]))


def strip(data: bytes) -> bytes:
    """The application's payload: ``data`` without its envelope, or ``data`` itself."""
    if data[:4] != MAGIC:
        return data
    return open_envelope(data).payload


def created_ms(data: bytes) -> int:
    """The creation time of an enveloped message (the producer's counting path: no
    checks beyond the fixed header)."""
    return _CREATED.unpack_from(data, _CREATED_AT)[0]
