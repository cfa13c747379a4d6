"""The settings one partition log runs with, and the flush policy they define.

``LogConfig`` holds the Kafka 0.7 log settings for one topic after per-topic
overrides were applied (the broker's configuration resolves them); every field is
in bytes, messages or milliseconds.
"""

from dataclasses import dataclass

HOUR_MS = 3600 * 1000


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.file.size
    roll_ms: int = 168 * HOUR_MS  # log.roll.hours
    flush_interval_messages: int = 500  # log.flush.interval
    flush_interval_ms: int = 3000  # log.default.flush.interval.ms, topic.flush.intervals.ms
    retention_ms: int = 168 * HOUR_MS  # log.retention.hours, topic.log.retention.hours
    retention_bytes: int = -1  # log.retention.size (-1: no size limit)
    max_message_size: int = 1_000_000  # max.message.size
    min_insync_replicas: int = 1  # min.insync.replicas (a replicated topic's durability-2 produces)
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime (record batches take the append time)

    def __post_init__(self):
        for name in ("segment_bytes", "roll_ms", "flush_interval_messages", "flush_interval_ms", "retention_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if self.retention_bytes < -1 or self.retention_bytes == 0:
            raise ValueError(f"retention_bytes must be positive or -1, not {self.retention_bytes}")
        if self.min_insync_replicas <= 0:
            raise ValueError(f"min_insync_replicas must be positive, not {self.min_insync_replicas}")
        if self.max_message_size <= 0:
            raise ValueError(f"max_message_size must be positive, not {self.max_message_size}")

    def flush_due(self, unflushed_messages: int, oldest_unflushed_ms: int, now_ms: int) -> bool:
        """Flush after ``flush_interval_messages`` messages, or once the oldest unflushed
        append is ``flush_interval_ms`` old: no message waits longer than that."""
        if unflushed_messages <= 0:
            return False
        return (
            unflushed_messages >= self.flush_interval_messages
            or now_ms - oldest_unflushed_ms >= self.flush_interval_ms
        )
