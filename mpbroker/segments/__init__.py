"""The partition log (Kafka 0.7's ``kafka/log`` and ``kafka/message``).

- ``message``, ``compression``, ``message_set``: the sans-IO codec of messages and
  message sets, validation and iteration;
- ``segment``, ``log``, ``log_view``, ``recovery``, ``retention``, ``offsets``: one
  partition's log on disk and the decisions about it;
- ``log_manager``, ``clean_shutdown``: the logs under one ``log.dir``;
- ``verify``: the offline check of every segment (``python -m mpbroker.segments.verify``).
"""

from mpbroker.segments.log import FileRegion, Log
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_manager import LogManager
from mpbroker.segments.message import encode_message, encode_message_set
from mpbroker.segments.message_set import Validation, iter_messages, validate_message_set

__all__ = [
    "FileRegion",
    "Log",
    "LogConfig",
    "LogManager",
    "Validation",
    "encode_message",
    "encode_message_set",
    "iter_messages",
    "validate_message_set",
]
