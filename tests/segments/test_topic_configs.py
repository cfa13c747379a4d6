"""Topic-level settings a modern client gives a topic (``segments.topic_configs``):
checked by Kafka's names, kept durably in log.dir, applied to the topic's LogConfig."""

import pytest

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.segments import topic_configs
from mpbroker.segments.log_config import LogConfig
from mpbroker.segments.log_manager import LogManager


def test_written_settings_are_read_back_and_applied(tmp_path):
    configs = {"retention.ms": "3600000", "segment.bytes": "1048576", "min.insync.replicas": "2",
               "message.timestamp.type": "LogAppendTime", "flush.messages": "10"}
    topic_configs.write(str(tmp_path), "orders", 4, topic_configs.check(configs))
    found = topic_configs.read(str(tmp_path), "orders")
    assert found == {"partitions": 4, "configs": configs}
    applied = topic_configs.applied(LogConfig(), found["configs"])
    assert (applied.retention_ms, applied.segment_bytes, applied.min_insync_replicas, applied.log_append_time,
            applied.flush_interval_messages) == (3_600_000, 1_048_576, 2, True, 10)
    assert applied.roll_ms == LogConfig().roll_ms  # what the topic does not set stays the broker's


@pytest.mark.parametrize("configs, complaint", [
    ({"retention.ms": "soon"}, "not a whole number"),
    ({"segment.bytes": "0"}, "segment_bytes must be positive"),
    ({"retention.bytes": "0"}, "retention_bytes"),
    ({"cleanup.policy": "compact"}, "compaction is not done here"),
    ({"min.insync.replicas": "0"}, "a number >= 1"),
    ({"no.such.key": "1"}, "not a topic-level setting"),
    ({"retention.ms": None}, "no value"),
])
def test_bad_settings_are_refused_by_name(configs, complaint):
    with pytest.raises(topic_configs.TopicConfigError, match=complaint):
        topic_configs.check(configs)


def test_a_topic_without_a_file_and_a_hostile_name_have_none(tmp_path):
    assert topic_configs.read(str(tmp_path), "never-made") is None
    assert topic_configs.read(str(tmp_path), "../evil") is None
    with pytest.raises(InvalidTopicError):
        topic_configs.write(str(tmp_path), "../evil", 1, {})
    assert not (tmp_path / "evil.json").exists()


def test_a_mirror_has_no_partition_count_and_bad_settings_are_taken_one_by_one(tmp_path):
    topic_configs.write(str(tmp_path), "replicated", None, {"retention.ms": "60000"})
    assert topic_configs.read(str(tmp_path), "replicated") == {"configs": {"retention.ms": "60000"}}
    kept, refused = topic_configs.usable({"retention.ms": "60000", "segment.bytes": "0", "no.such": "1"})
    assert kept == {"retention.ms": "60000"} and set(refused) == {"segment.bytes", "no.such"}
    assert "segment_bytes must be positive" in refused["segment.bytes"]


def test_a_changed_file_reaches_the_topics_open_logs(tmp_path):
    log_dir = str(tmp_path)

    def config_for(topic):
        found = topic_configs.read(log_dir, topic)
        return topic_configs.applied(LogConfig(), found["configs"] if found else {})

    manager = LogManager(log_dir, config_for)
    try:
        first, second, other = (manager.get_or_create("t", 0), manager.get_or_create("t", 1),
                                manager.get_or_create("u", 0))
        topic_configs.write(log_dir, "t", None, {"segment.bytes": "4096", "min.insync.replicas": "2"})
        assert manager.reconfigure_topic("t") == [first, second]
        assert (first.config.segment_bytes, second.config.min_insync_replicas) == (4096, 2)
        assert other.config == LogConfig()
        assert manager.config_for("t").segment_bytes == 4096  # what a new log of it is made with
    finally:
        manager.close()
