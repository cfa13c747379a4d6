"""The partition log on disk (Kafka 0.7's ``kafka/log``); the messages and message sets
it holds are the codec's (``mpbroker.codec``, Kafka 0.7's ``kafka/message``).

- ``segment``, ``log``, ``log_view``, ``recovery``, ``retention``, ``offsets``: one
  partition's log on disk and the decisions about it;
- ``log_manager``, ``clean_shutdown``: the logs under one ``log.dir``;
- ``verify``: the offline check of every segment (``python -m mpbroker.segments.verify``).
"""

from mpbroker.segments.log import FileRegion, Log
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_manager import LogManager

__all__ = [
    "FileRegion",
    "Log",
    "LogConfig",
    "LogManager",
]
