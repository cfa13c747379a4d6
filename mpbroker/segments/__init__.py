"""The partition log on disk (Kafka 0.7's ``kafka/log``); the messages and message sets
it holds are the codec's (``mpbroker.codec``, Kafka 0.7's ``kafka/message``).

- ``segment``, ``log``, ``log_view``, ``recovery``, ``retention``, ``offsets``: one
  partition's log on disk and the decisions about it; ``log_view`` and ``offsets`` are
  also how the acceptor reads logs it does not own (fetch, OFFSETS);
- ``log_manager``, ``clean_shutdown``: the logs under one ``log.dir``;
- ``verify``: the offline check of every segment (``python -m mpbroker.segments.verify``).
"""

from mpbroker.segments.log import Log
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_manager import LogManager
from mpbroker.segments.log_view import FileRange

__all__ = [
    "FileRange",
    "Log",
    "LogConfig",
    "LogManager",
]
