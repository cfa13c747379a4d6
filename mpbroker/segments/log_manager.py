"""The partition logs under one ``log.dir`` that one owner is responsible for.

A broker worker owns a fixed subset of partitions (``owns``); the manager opens
those that exist on disk at start-up (recovering them unless the last shutdown was
clean), creates new ones on first use, and runs the periodic duties over all of
them: time-based flushes and retention. Topic names are checked before any path is
built, so nothing is ever created outside ``log.dir``.
"""

import logging
import os

from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.codec.errors import StorageError
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments import topic_configs, topic_deletion
from mpbroker.segments.clean_shutdown import MARKER_NAME
from mpbroker.segments.log import Log
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.naming import parse_partition_dir

_BROKER_DIRECTORIES = (topic_configs.DIRECTORY, topic_deletion.DIRECTORY)  # not partitions: no warning

log = logging.getLogger(__name__)


def _owns_everything(topic: str, partition: int) -> bool:
    return True


class LogManager:
    def __init__(self, log_dir: str, config_for=None, *, owns=_owns_everything, clock_ms=wall_clock_ms,
                 timer_ms=monotonic_ms):
        self.log_dir = os.path.realpath(log_dir)
        self._config_for = config_for or (lambda topic: LogConfig())
        self._owns = owns
        self._clock_ms = clock_ms  # dates (retention)
        self._timer_ms = timer_ms  # intervals (flush timing)
        self._logs = {}
        try:
            os.makedirs(self.log_dir, 0o755, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log.dir {self.log_dir}: {exc.strerror}") from exc

    def open_existing(self, *, recover: bool, recovery_point_of=None) -> list:
        """Open every owned partition log found under ``log.dir``; apply retention.
        ``recovery_point_of(topic, partition)`` says where recovery starts (None: not
        known; see ``recovery``)."""
        opened = []
        for name in sorted(os.listdir(self.log_dir)):
            path = os.path.join(self.log_dir, name)
            if name == MARKER_NAME:
                continue
            parsed = parse_partition_dir(name)
            is_directory = os.path.isdir(path)
            if parsed is None:
                if is_directory and name not in _BROKER_DIRECTORIES and topic_deletion.retired_partition(name) is None:
                    log.warning("ignoring %s in log.dir: not a <topic>-<partition> directory", path)
                continue
            topic, partition = parsed
            if not self._owns(topic, partition) or (topic, partition) in self._logs:
                continue
            if not is_directory:
                log.warning("ignoring %s in log.dir: named like a partition directory but not a directory", path)
                continue
            point = recovery_point_of(topic, partition) if recover and recovery_point_of else None
            opened.append(self._open(topic, partition, recover=recover, recovery_point=point))
        now = self._clock_ms()
        for partition_log in opened:
            partition_log.apply_retention(now)
        return opened

    def _open(self, topic: str, partition: int, *, recover: bool, recovery_point: int | None = None,
              record_batches: bool = False) -> Log:
        partition_log = Log.open(
            self.log_dir, topic, partition, self._config_for(topic), recover=recover,
            recovery_point=recovery_point, clock_ms=self._clock_ms, timer_ms=self._timer_ms,
            record_batches=record_batches,
        )
        self._logs[(topic, partition)] = partition_log
        return partition_log

    def config_for(self, topic: str) -> LogConfig:
        """The settings a new log of ``topic`` would be made with."""
        return self._config_for(topic)

    def get(self, topic: str, partition: int):
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, record_batches: bool = False) -> Log:
        """The log of a partition this owner serves, created empty on first use (holding
        record batches if ``record_batches``; an existing log keeps its format)."""
        found = self._logs.get((topic, partition))
        if found is not None:
            return found
        topic = check_topic(topic)
        if not self._owns(topic, partition):
            raise ValueError(f"partition {topic}-{partition} is not owned here")
        return self._open(topic, partition, recover=False, record_batches=record_batches)

    def logs(self):
        return self._logs.values()

    def remove(self, topic: str, partition: int) -> None:
        """Delete a partition's log (its topic is deleted): its files are closed, its
        directory renamed out of the way and removed (``topic_deletion``). The caller
        made sure no flush of it is in flight."""
        found = self._logs.pop((topic, partition), None)
        if found is None:
            return
        found.discard()
        if os.path.isdir(found.directory):
            topic_deletion.remove_partition_directory(found.directory)

    def remove_leftovers(self, topic: str) -> None:
        """Every directory of ``topic`` this owner serves that no open log holds, and
        every one renamed for deletion (a predecessor died in the middle)."""
        for directory in topic_deletion.partition_directories(self.log_dir, topic, self._owns):
            topic_deletion.remove_partition_directory(directory)
        for retired in topic_deletion.retired_directories(self.log_dir, topic, self._owns):
            topic_deletion.remove_retired(retired)

    def __len__(self) -> int:
        return len(self._logs)

    def reconfigure(self, config_for) -> None:
        """Apply new settings (flush, retention, roll) to every open log."""
        self._config_for = config_for
        for partition_log in self._logs.values():
            partition_log.config = config_for(partition_log.topic)

    def reconfigure_topic(self, topic: str) -> list:
        """Apply the topic's settings as they are now (its settings file changed) to its
        open logs; returns them."""
        found = [partition_log for partition_log in self._logs.values() if partition_log.topic == topic]
        if found:
            config = self._config_for(topic)
            for partition_log in found:
                partition_log.config = config
        return found

    def logs_due_for_flush(self, now_ms: int | None = None) -> list:
        """``now_ms`` is on the timer clock (``monotonic_ms``)."""
        now = self._timer_ms() if now_ms is None else now_ms
        return [partition_log for partition_log in self._logs.values() if partition_log.flush_due(now)]

    def flush_all(self) -> None:
        for partition_log in self._logs.values():
            partition_log.flush()

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Run retention over every log; return how many segments were deleted."""
        now = self._clock_ms() if now_ms is None else now_ms
        return sum(len(partition_log.apply_retention(now)) for partition_log in self._logs.values())

    def close(self) -> None:
        """Flush and close every log; raise the first failure after closing the rest."""
        first_error = None
        for partition_log in self._logs.values():
            try:
                partition_log.close()
            except Exception as exc:  # keep closing the others
                log.error("closing %s failed: %s", partition_log.directory, exc)
                first_error = first_error or exc
        self._logs.clear()
        if first_error is not None:
            raise first_error
