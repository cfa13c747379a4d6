"""The Kafka 0.7 wire protocol, sans-IO: framing, requests and responses.

Nothing here touches a socket: bytes go in, typed requests or responses come out,
and encoders return bytes (or header/body pairs, so a large message set can be
sent with a vectored write without copying it). The broker and the clients share
these codecs.
"""

from mpbroker.protocol.framing import FrameReader, MalformedRequestError
from mpbroker.protocol.requests import (
    Durability,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceRequest,
    RequestType,
    decode_request,
)

__all__ = [
    "Durability",
    "FetchRequest",
    "FrameReader",
    "MalformedRequestError",
    "MultiFetchRequest",
    "MultiProduceRequest",
    "OffsetsRequest",
    "ProduceAckedRequest",
    "ProduceRequest",
    "RequestType",
    "decode_request",
]
