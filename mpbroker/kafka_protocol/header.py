"""Request and response headers of the modern protocol.

A request frame is ``[int16 api_key][int16 api_version][int32 correlation_id]
[nullable string client_id]``, then, for flexible versions (header v2), tagged
fields, then the body. The first eight bytes sit at fixed places, so the correlation
id can be read even from a request whose version is unknown (to answer it). A
response is ``[int32 correlation_id]`` (header v0), plus an empty tagged-field block
for flexible versions (header v1) except ApiVersions, whose answer is always v0.
Hand-written: it runs on every request and is a dozen lines of ``struct``."""

import struct
from typing import NamedTuple

from mpbroker.codec.framing import MalformedRequestError

_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_PEEK = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")
MIN_HEADER_BYTES = _FIXED.size


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_start: int  # where the body begins in the frame


def peek_correlation(frame):
    """``(api_key, api_version, correlation_id)``, or None for a frame under 8 bytes."""
    if len(frame) < _PEEK.size:
        return None
    return _PEEK.unpack_from(frame, 0)


def decode_request_header(frame, flexible: bool) -> RequestHeader:
    """The header of one request frame; MalformedRequestError if it does not fit."""
    if len(frame) < _FIXED.size:
        raise MalformedRequestError(f"a request header needs {_FIXED.size} bytes, the frame has {len(frame)}")
    api_key, api_version, correlation_id, length = _FIXED.unpack_from(frame, 0)
    position = _FIXED.size
    client_id = None
    if length >= 0:
        end = position + length
        if end > len(frame):
            raise MalformedRequestError("the client id runs past the end of the request")
        try:
            client_id = bytes(frame[position:end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequestError("the client id is not UTF-8") from exc
        position = end
    elif length != -1:
        raise MalformedRequestError(f"bad client id length {length}")
    if flexible:
        position = skip_tagged_fields(frame, position)
    return RequestHeader(api_key, api_version, correlation_id, client_id, position)


def skip_tagged_fields(buffer, position: int) -> int:
    """The position after a tagged-field block (count, then tag, size, data each)."""
    count, position = read_unsigned_varint(buffer, position)
    for _ in range(count):
        _, position = read_unsigned_varint(buffer, position)
        size, position = read_unsigned_varint(buffer, position)
        position += size
        if position > len(buffer):
            raise MalformedRequestError("a tagged field runs past the end of the request")
    return position


def read_unsigned_varint(buffer, position: int) -> tuple:
    value = shift = 0
    while True:
        if position >= len(buffer):
            raise MalformedRequestError("a varint runs past the end of the request")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise MalformedRequestError("a varint longer than 5 bytes")


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """The response header (v1 with its empty tagged fields when ``flexible``)."""
    head = _CORRELATION.pack(correlation_id)
    return head + b"\x00" if flexible else head


def frame(parts_bytes: int) -> bytes:
    """The int32 size in front of a response of ``parts_bytes`` bytes."""
    return _CORRELATION.pack(parts_bytes)
