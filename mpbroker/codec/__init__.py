"""The shared language of the broker and the clients, sans-IO (the bottom layer).

- ``framing``, ``requests``, ``responses``: the Kafka 0.7 wire protocol;
- ``message``, ``message_set``, ``compression``: messages and message sets (the bytes a
  produce carries, a segment file holds and a fetch returns), their validation and
  iteration (Kafka 0.7's ``kafka/message``);
- ``errors``: the error codes and the exceptions that carry them;
- ``topic_names``: the topic-name rule.

Nothing here touches a socket or a file and nothing here imports anything above it:
bytes go in, typed requests, responses and messages come out, and encoders return bytes
(or header/body pairs, so a large message set can be sent with a vectored write without
copying it).
"""

from mpbroker.codec.framing import FrameReader, MalformedRequestError
from mpbroker.codec.requests import (
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
