"""Tests of the mpbroker.config package: the properties parser, defaults, validation, per-topic
settings, loading from a file with overrides, and the round trip through strings."""

import dataclasses
import grp
import os

import pytest

from mpbroker.config.broker_config import (
    BrokerConfig,
    config_from_properties,
    control_socket_from_file,
    load_config,
    setting_from_file,
)
from mpbroker.config.errors import ConfigError
from mpbroker.config.keys import ALIASES, IGNORED_KEYS, KEYS, KEYS_BY_NAME
from mpbroker.config.properties import parse_properties
from mpbroker.config.values import group_id
from mpbroker.segments.log_config import HOUR_MS, LogConfig


def config_with(**props) -> BrokerConfig:
    """A config from ``log_dir="/x"``-style arguments (underscores become dots)."""
    config, warnings = config_from_properties({name.replace("_", "."): value for name, value in props.items()})
    assert warnings == []
    return config


# --------------------------------------------------------------------------------------
# parse_properties
# --------------------------------------------------------------------------------------


def test_comments_and_blank_lines_are_skipped():
    text = "# a comment\n   ! another one\n\n   \t\nkey=value\n  #indented=comment\n"
    assert parse_properties(text) == {"key": "value"}


@pytest.mark.parametrize(
    "line",
    ["key=value", "key:value", "key value", "key = value", "  key  :  value", "key\t\tvalue", "key \t= value"],
)
def test_every_separator_with_blanks_around_it(line):
    assert parse_properties(line) == {"key": "value"}


def test_only_the_first_separator_splits():
    assert parse_properties("url=http://host:80/a=b\nkey==x\nk : : v") == {
        "url": "http://host:80/a=b",
        "key": "=x",
        "k": ": v",
    }


def test_key_without_value_is_empty_string():
    assert parse_properties("lonely\nalso=\n") == {"lonely": "", "also": ""}


def test_continuation_lines_are_joined_without_their_leading_blanks():
    text = "list=a,\\\n      b,\\\n\t  c\nnext=1"
    assert parse_properties(text) == {"list": "a,b,c", "next": "1"}


def test_even_number_of_backslashes_does_not_continue():
    text = "path=C:\\\\\nnext=1"
    assert parse_properties(text) == {"path": "C:\\", "next": "1"}


def test_continued_line_starting_with_hash_is_not_a_comment():
    assert parse_properties("key=a\\\n  #b") == {"key": "a#b"}


def test_backslash_at_end_of_text_is_dropped():
    assert parse_properties("key=value\\") == {"key": "value"}


def test_all_line_endings_are_accepted():
    assert parse_properties("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}


def test_escapes_in_values():
    text = r"v=tab\there\nnl\rcr\fff\\bs\=eq\:colon\ sp\u0041\u00e9\#"
    assert parse_properties(text) == {"v": "tab\there\nnl\rcr\fff\\bs=eq:colon spAé#"}


def test_escaped_separators_belong_to_the_key():
    assert parse_properties(r"a\=b\:c\ d=value") == {"a=b:c d": "value"}


def test_surrogate_pair_escape_is_one_character():
    assert parse_properties(r"smile=\uD83D\uDE00") == {"smile": "\U0001F600"}


@pytest.mark.parametrize("text", [r"key=\u12G4", r"key=\u12", "ok=1\n" r"bad=\uZZZZ"])
def test_malformed_unicode_escape_is_refused(text):
    with pytest.raises(ConfigError, match=r"line \d+: malformed escape"):
        parse_properties(text)


def test_later_duplicates_win():
    assert parse_properties("port=1\nport=2\nport : 3") == {"port": "3"}


# --------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    "brokerid": 0,
    "hostname": "",
    "port": 9092,
    "kafka_port": 9093,
    "advertised_host_name": "",
    "advertised_port": -1,
    "auto_create_topics_enable": True,
    "message_timestamp_type": "CREATETIME",
    "offsets_topic_num_partitions": 50,
    "offsets_topic_replication_factor": 3,
    "offsets_topic_segment_bytes": 104857600,
    "group_initial_rebalance_delay_ms": 3000,
    "group_min_session_timeout_ms": 6000,
    "group_max_session_timeout_ms": 1800000,
    "group_max_size": 2147483647,
    "offset_metadata_max_bytes": 4096,
    "log_dir": "/tmp/kafka-logs",
    "num_partitions": 1,
    "topic_partition_count_map": {},
    "log_file_size": 1073741824,
    "log_roll_hours": 168,
    "log_flush_interval": 500,
    "topic_log_flush_interval": {},
    "log_default_flush_scheduler_interval_ms": 3000,
    "log_default_flush_interval_ms": 3000,
    "topic_flush_intervals_ms": {},
    "log_retention_hours": 168,
    "topic_log_retention_hours": {},
    "log_retention_size": -1,
    "log_cleanup_interval_mins": 10,
    "log_flush_offset_checkpoint_interval_ms": 1000,
    "max_message_size": 1000000,
    "max_socket_request_bytes": 104857600,
    "max_inflated_request_bytes": 104857600,
    "max_connections": 10000,
    "max_connections_per_ip": 1000,
    "request_receive_timeout_ms": 30000,
    "connections_max_idle_ms": 600000,
    "max_queued_responses": 1000,
    "enable_zookeeper": False,
    "zk_connect": "",
    "zk_connectiontimeout_ms": 6000,
    "zk_sessiontimeout_ms": 6000,
    "unclean_leader_election_enable": False,
    "default_replication_factor": 1,
    "min_insync_replicas": 1,
    "replica_lag_time_max_ms": 10000,
    "replica_fetch_max_bytes": 1048576,
    "num_replica_fetchers": 1,
    "controller_socket_timeout_ms": 30000,
    "num_workers": min(os.cpu_count() or 1, 256),
    "ring_buffer_bytes": 8388608,
    "busy_poll_us": 200,
    "sched_batch": True,
    "worker_heartbeat_timeout_ms": 30000,
    "control_socket": "",
    "control_socket_group": "",
    "allow_unknown_keys": False,
    "log_level": "INFO",
    "metrics_enable": False,
    "metrics_host": "",
    "metrics_port": 9099,
}


def test_empty_file_gives_every_default():
    config, warnings = config_from_properties(parse_properties(""))
    assert warnings == []
    assert dataclasses.asdict(config) == EXPECTED_DEFAULTS


def test_num_workers_defaults_to_the_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert config_with().num_workers == 7
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert config_with().num_workers == 1


def test_every_key_has_one_line_of_help_and_matches_an_attribute():
    names = [key.name for key in KEYS]
    assert len(names) == len(set(names)) == len(EXPECTED_DEFAULTS)
    assert [key.attribute for key in KEYS] == [field.name for field in dataclasses.fields(BrokerConfig)]
    for key in KEYS:
        assert key.help.strip() and "\n" not in key.help, key.name


def test_control_socket_defaults_into_log_dir():
    assert config_with(log_dir="/data/kafka").control_socket_path == "/data/kafka/mpbroker.sock"
    assert config_with(control_socket="/run/mp.sock").control_socket_path == "/run/mp.sock"


def test_control_socket_group_is_a_known_name_or_a_number():
    root_group = grp.getgrgid(0).gr_name
    assert group_id(config_with(control_socket_group=root_group).control_socket_group) == 0
    assert group_id(config_with(control_socket_group="4242").control_socket_group) == 4242
    with pytest.raises(ConfigError, match="control.socket.group: 'no-such-group' is not a group"):
        config_with(control_socket_group="no-such-group")


# --------------------------------------------------------------------------------------
# Accepted values
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [("7", 7), (" +7 ", 7), ("007", 7), ("-1", -1), ("2048", 2048)])
def test_integer_forms(text, expected):
    assert config_with(log_retention_size=text).log_retention_size == expected


@pytest.mark.parametrize(
    "text, expected",
    [("true", True), ("TRUE", True), ("Yes", True), ("1", True), ("false", False), ("No", False), ("0", False)],
)
def test_boolean_forms(text, expected):
    config = config_with(enable_zookeeper=text, zk_connect="zk1:2181")
    assert config.enable_zookeeper is expected


def test_log_level_is_case_insensitive_and_stored_upper():
    assert config_with(log_level=" warning ").log_level == "WARNING"


def test_values_are_stripped():
    config = config_with(log_dir="  /data  ", hostname=" example.org ")
    assert (config.log_dir, config.hostname) == ("/data", "example.org")


def test_map_syntax_with_blanks():
    config, _ = config_from_properties({"topic.partition.count.map": " clicks : 8 ,views:16,a.b-c_d:3 "})
    assert config.topic_partition_count_map == {"clicks": 8, "views": 16, "a.b-c_d": 3}


def test_ring_buffer_power_of_two_and_port_zero_are_accepted():
    config = config_with(ring_buffer_bytes="65536", port="0", log_retention_size="1")
    assert (config.ring_buffer_bytes, config.port, config.log_retention_size) == (65536, 0, 1)


# --------------------------------------------------------------------------------------
# Refused values
# --------------------------------------------------------------------------------------

BAD_VALUES = [
    # non-integers
    ("log.flush.interval", "abc", "log.flush.interval: 'abc' is not an integer"),
    ("port", "", "port: '' is not an integer"),
    ("num.partitions", "1.0", "num.partitions: '1.0' is not an integer"),
    ("log.file.size", "1e3", "log.file.size: '1e3' is not an integer"),
    ("max.connections", "1_000", "max.connections: '1_000' is not an integer"),
    ("brokerid", "0x10", "brokerid: '0x10' is not an integer"),
    # below the minimum
    ("num.partitions", "0", "num.partitions: 0 is below the minimum 1"),
    ("brokerid", "-1", "brokerid: -1 is below the minimum 0"),
    ("max.socket.request.bytes", "1023", "max.socket.request.bytes: 1023 is below the minimum 1024"),
    ("worker.heartbeat.timeout.ms", "999", "worker.heartbeat.timeout.ms: 999 is below the minimum 1000"),
    ("log.retention.size", "0", "log.retention.size: 0 is below the minimum 1 and is not -1"),
    ("log.retention.size", "-2", "log.retention.size: -2 is below the minimum 1 and is not -1"),
    ("log.default.flush.interval.ms", "0", "log.default.flush.interval.ms: 0 is below the minimum 1"),
    ("num.workers", "0", "num.workers: 0 is below the minimum 1"),
    # above the maximum
    ("port", "65536", "port: 65536 is above the maximum 65535"),
    ("num.workers", "257", "num.workers: 257 is above the maximum 256"),
    # power of two
    ("ring.buffer.bytes", "100000", "ring.buffer.bytes: 100000 is not a power of two"),
    ("ring.buffer.bytes", "32768", "ring.buffer.bytes: 32768 is below the minimum 65536"),
    # booleans, strings, choices
    ("enable.zookeeper", "maybe", "enable.zookeeper: 'maybe' is not a boolean, expected true/false/yes/no/1/0"),
    ("log.dir", "  ", "log.dir: '' is empty, expected a non-empty value"),
    ("log.level", "loud", "log.level: 'LOUD' is not one of DEBUG, INFO, WARNING, ERROR"),
    # maps
    ("topic.partition.count.map", "clicks", "topic.partition.count.map: item 'clicks' is malformed"),
    ("topic.partition.count.map", "clicks:1,", "topic.partition.count.map: item '' is malformed"),
    ("topic.log.flush.interval", ":5", "topic.log.flush.interval: item ':5' is malformed"),
    ("topic.log.flush.interval", "a:1:2", "topic.log.flush.interval: item 'a:1:2' is malformed"),
    ("topic.flush.intervals.ms", "a:x", "topic.flush.intervals.ms: 'x' for topic 'a' is not an integer"),
    ("topic.log.retention.hours", "a:0", "topic.log.retention.hours: 0 for topic 'a' is below the minimum 1"),
    ("topic.partition.count.map", "a:1,a:2", "topic.partition.count.map: topic 'a' is listed twice"),
    ("topic.partition.count.map", "../x:4", "topic.partition.count.map: illegal topic name '../x'"),
    ("topic.log.retention.hours", "..:4", "topic.log.retention.hours: illegal topic name '..'"),
    ("topic.flush.intervals.ms", "a/b:4", "topic.flush.intervals.ms: illegal topic name 'a/b'"),
]


@pytest.mark.parametrize("name, value, message", BAD_VALUES)
def test_bad_values_are_refused_naming_key_value_and_expectation(name, value, message):
    with pytest.raises(ConfigError) as refused:
        config_from_properties({name: value})
    assert str(refused.value).startswith(message)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_zookeeper_needs_a_connect_string():
    with pytest.raises(ConfigError, match=r"^zk\.connect: '' is empty, but enable\.zookeeper is true"):
        config_from_properties({"enable.zookeeper": "yes"})
    assert config_with(enable_zookeeper="yes", zk_connect="zk1:2181").zk_connect == "zk1:2181"


def test_direct_construction_is_validated_too():
    config = config_with()
    with pytest.raises(ConfigError, match=r"^port: 70000 is above the maximum 65535"):
        dataclasses.replace(config, port=70000)
    with pytest.raises(ConfigError, match=r"^num\.partitions: '3' is not of type int"):
        dataclasses.replace(config, num_partitions="3")
    with pytest.raises(ConfigError, match=r"^enable\.zookeeper: 1 is not of type bool"):
        dataclasses.replace(config, enable_zookeeper=1)


def test_config_does_not_share_the_callers_map():
    topic_map = {"clicks": 4}
    config = dataclasses.replace(config_with(), topic_partition_count_map=topic_map)
    topic_map["clicks"] = 99
    assert config.partitions_for("clicks") == 4


# --------------------------------------------------------------------------------------
# Warnings
# --------------------------------------------------------------------------------------


def test_unknown_key_is_refused_with_the_closest_known_name():
    with pytest.raises(ConfigError) as refused:
        config_from_properties({"log.retention.hour": "1", "port": "9093"})
    message = str(refused.value)
    assert message.startswith("unknown configuration key 'log.retention.hour' (did you mean 'log.retention.hours'?)")
    assert "--allow-unknown-keys" in message and "allow.unknown.keys=true" in message


def test_every_unknown_key_is_named_with_a_guess_where_there_is_one():
    with pytest.raises(ConfigError) as refused:
        config_from_properties({"zookeeper.conect": "z:1", "no.such.thing": "1", "port": "1"})
    message = str(refused.value)
    assert message.startswith("unknown configuration keys 'zookeeper.conect' (did you mean 'zookeeper.connect'?), "
                              "'no.such.thing': fix them")


@pytest.mark.parametrize("allowed", ["true", "yes", " 1 "])
def test_allow_unknown_keys_turns_the_refusal_into_a_warning(allowed):
    config, warnings = config_from_properties({"foo.bar": "1", "port": "9093", "allow.unknown.keys": allowed})
    assert warnings == ["unknown configuration key 'foo.bar' ignored (allow.unknown.keys is true)"]
    assert config.port == 9093 and config.allow_unknown_keys is True


def test_allow_unknown_keys_false_still_refuses_and_a_bad_value_is_named():
    with pytest.raises(ConfigError, match="^unknown configuration key 'foo'"):
        config_from_properties({"foo": "1", "allow.unknown.keys": "false"})
    with pytest.raises(ConfigError, match="^allow.unknown.keys: 'sometimes' is not a boolean"):
        config_from_properties({"allow.unknown.keys": "sometimes"})


@pytest.mark.parametrize(
    "name, reason",
    [
        ("num.threads", "num.workers"),
        ("socket.send.buffer", "autotuning"),
        ("socket.receive.buffer", "autotuning"),
        ("monitoring.period.secs", "statistics"),
        ("zk.synctime.ms", "zk.sessiontimeout.ms"),
    ],
)
def test_ignored_kafka_keys_warn_with_the_reason(name, reason):
    config, warnings = config_from_properties({name: "not even checked"})
    assert len(warnings) == 1
    assert warnings[0].startswith(f"configuration key {name!r} ignored: ")
    assert reason in warnings[0]
    assert config == config_with()


# --------------------------------------------------------------------------------------
# Derived values and per-topic settings
# --------------------------------------------------------------------------------------


def test_flush_interval_ms_defaults_to_the_scheduler_interval():
    config = config_with(log_default_flush_scheduler_interval_ms="1234")
    assert config.log_default_flush_interval_ms == 1234
    assert config.log_config_for("clicks").flush_interval_ms == 1234


def test_metrics_host_defaults_to_the_broker_hostname():
    """A broker bound to one address does not expose its metrics on every interface."""
    assert config_with(hostname="127.0.0.1").metrics_host == "127.0.0.1"
    assert config_with(hostname="127.0.0.1", metrics_host="").metrics_host == ""
    assert config_with(hostname="127.0.0.1", metrics_host="10.0.0.5").metrics_host == "10.0.0.5"


def test_explicit_flush_interval_ms_wins_over_the_scheduler_interval():
    config = config_with(log_default_flush_scheduler_interval_ms="1234", log_default_flush_interval_ms="50")
    assert (config.log_default_flush_scheduler_interval_ms, config.log_default_flush_interval_ms) == (1234, 50)


def test_partitions_for():
    config = config_with(num_partitions="3", topic_partition_count_map="clicks:8,views:1")
    assert config.partitions_for("clicks") == 8
    assert config.partitions_for("views") == 1
    assert config.partitions_for("other") == 3


def test_log_config_for_a_topic_without_overrides():
    props = {
        "log.file.size": "4096",
        "log.roll.hours": "2",
        "log.flush.interval": "10",
        "log.default.flush.interval.ms": "700",
        "log.retention.hours": "5",
        "log.retention.size": "100000",
        "max.message.size": "2048",
        "topic.log.flush.interval": "clicks:1",
        "topic.flush.intervals.ms": "clicks:20",
        "topic.log.retention.hours": "clicks:48",
    }
    config, _ = config_from_properties(props)
    assert config.log_config_for("views") == LogConfig(
        segment_bytes=4096,
        roll_ms=2 * HOUR_MS,
        flush_interval_messages=10,
        flush_interval_ms=700,
        retention_ms=5 * HOUR_MS,
        retention_bytes=100000,
        max_message_size=2048,
    )
    assert config.log_config_for("clicks") == LogConfig(
        segment_bytes=4096,
        roll_ms=2 * HOUR_MS,
        flush_interval_messages=1,
        flush_interval_ms=20,
        retention_ms=48 * HOUR_MS,
        retention_bytes=100000,
        max_message_size=2048,
    )


def test_default_log_config_matches_the_log_config_defaults():
    assert config_with().log_config_for("clicks") == LogConfig()


# --------------------------------------------------------------------------------------
# load_config
# --------------------------------------------------------------------------------------


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# --------------------------------------------------------------------------------------
# Later Kafka names
# --------------------------------------------------------------------------------------

LATER_NAMES = [
    ("broker.id", "7", "brokerid", 7),
    ("host.name", "10.1.2.3", "hostname", "10.1.2.3"),
    ("log.dirs", "/data/kafka", "log_dir", "/data/kafka"),
    ("log.dirs", " /data/kafka , ", "log_dir", "/data/kafka"),
    ("zookeeper.connect", "zk1:2181/kafka", "zk_connect", "zk1:2181/kafka"),
    ("zookeeper.session.timeout.ms", "9000", "zk_sessiontimeout_ms", 9000),
    ("zookeeper.connection.timeout.ms", "8000", "zk_connectiontimeout_ms", 8000),
    ("log.segment.bytes", "536870912", "log_file_size", 536870912),
    ("log.retention.bytes", "1048576", "log_retention_size", 1048576),
    ("log.retention.hours.per.topic", "clicks:24", "topic_log_retention_hours", {"clicks": 24}),
    ("message.max.bytes", "2000000", "max_message_size", 2000000),
    ("log.flush.interval.messages", "10000", "log_flush_interval", 10000),
    ("log.flush.interval.ms", "1000", "log_default_flush_interval_ms", 1000),
    ("log.flush.scheduler.interval.ms", "500", "log_default_flush_scheduler_interval_ms", 500),
    ("log.flush.interval.ms.per.topic", "clicks:100", "topic_flush_intervals_ms", {"clicks": 100}),
    ("socket.request.max.bytes", "4096", "max_socket_request_bytes", 4096),
]


@pytest.mark.parametrize("name, value, attribute, expected", LATER_NAMES)
def test_later_kafka_names_set_the_07_key(name, value, attribute, expected):
    config, warnings = config_from_properties({name: value})
    assert warnings == []
    assert getattr(config, attribute) == expected
    assert config == config_with(**{attribute: value.strip(" ,")})


def test_every_alias_names_a_key_that_exists_and_is_not_one_itself():
    assert {name for name, *_ in LATER_NAMES} | {"socket.send.buffer.bytes", "socket.receive.buffer.bytes",
                                                   "zookeeper.sync.time.ms"} == set(ALIASES)
    for alias, target in ALIASES.items():
        assert target in KEYS_BY_NAME or target in IGNORED_KEYS, alias
        assert alias not in KEYS_BY_NAME and alias not in IGNORED_KEYS, alias


def test_a_later_kafka_config_registers_in_zookeeper_as_its_broker_id():
    """The issue's case: these three were warned about, and the broker ran as broker 0
    in /tmp/kafka-logs without ZooKeeper."""
    config, warnings = config_from_properties({"broker.id": "3", "log.dirs": "/data/kafka",
                                               "zookeeper.connect": "zk1:2181", "enable.zookeeper": "true"})
    assert (config.brokerid, config.log_dir, config.zk_connect, config.enable_zookeeper) == (
        3, "/data/kafka", "zk1:2181", True)
    assert warnings == []


@pytest.mark.parametrize("name, reason", [("socket.send.buffer.bytes", "autotuning"),
                                          ("socket.receive.buffer.bytes", "autotuning"),
                                          ("zookeeper.sync.time.ms", "zk.sessiontimeout.ms")])
def test_later_names_of_ignored_keys_warn_under_the_name_written(name, reason):
    config, warnings = config_from_properties({name: "65536"})
    assert len(warnings) == 1 and warnings[0].startswith(f"configuration key {name!r} ignored: ")
    assert reason in warnings[0]
    assert config == config_with()


def test_several_log_dirs_are_refused():
    with pytest.raises(ConfigError, match=r"^log\.dirs: '/a,/b' names 2 directories, but mpbroker keeps every "
                                          r"partition under one directory"):
        config_from_properties({"log.dirs": "/a,/b"})


@pytest.mark.parametrize("alias, key", [("broker.id", "brokerid"), ("log.dirs", "log.dir"),
                                        ("zookeeper.connect", "zk.connect"), ("message.max.bytes", "max.message.size")])
def test_both_names_of_one_key_are_refused(alias, key):
    later = rf"^{alias} and {key} are both set: {alias} is the later Kafka name of {key}"
    with pytest.raises(ConfigError, match=later):
        config_from_properties({alias: "1", key: "1"})


def test_a_bad_value_under_a_later_name_is_refused_naming_that_name():
    with pytest.raises(ConfigError, match=r"^broker\.id \(mpbroker's brokerid\): -1 is below the minimum 0"):
        config_from_properties({"broker.id": "-1"})
    with pytest.raises(ConfigError, match=r"^log\.segment\.bytes \(mpbroker's log\.file\.size\): 'big' is not an int"):
        config_from_properties({"log.segment.bytes": "big"})
    with pytest.raises(ConfigError, match=r"^log\.dirs \(mpbroker's log\.dir\): '' is empty"):
        config_from_properties({"log.dirs": " , "})


def test_an_override_under_either_name_replaces_the_files_setting(tmp_path):
    path = write(tmp_path / "server.properties", "broker.id=4\nlog.dir=/from/file\n")
    config, _ = load_config(path, ["brokerid=7", "log.dirs=/from/override"])
    assert (config.brokerid, config.log_dir) == (7, "/from/override")
    assert load_config(path)[0].brokerid == 4
    both = write(tmp_path / "both.properties", "broker.id=4\nbrokerid=4\n")
    with pytest.raises(ConfigError, match=rf"^broker\.id and brokerid are both set in {both}"):
        load_config(both)
    with pytest.raises(ConfigError, match=r"^broker\.id and brokerid are both set in the --override options"):
        load_config(path, ["broker.id=1", "brokerid=2"])


def test_ctl_reads_the_socket_and_zk_connect_under_either_name(tmp_path):
    path = write(tmp_path / "server.properties", "log.dirs=/data/kafka\nzookeeper.connect=zk1:2181\n")
    assert control_socket_from_file(path) == "/data/kafka/mpbroker.sock"
    assert setting_from_file(path, "zk.connect") == ("zk1:2181", path)
    assert setting_from_file(path, "zk.connect", ["zk.connect=zk2:2181"]) == ("zk2:2181", "--override")
    assert setting_from_file(None, "log.dir", ["log.dirs=/x"]) == ("/x", "--override")
    assert setting_from_file(None, "log.dir") == ("/tmp/kafka-logs", "default")
    with pytest.raises(ConfigError, match="log.dirs: '/a,/b' names 2 directories"):
        control_socket_from_file(None, ["log.dirs=/a,/b"])


def test_load_config_from_a_file_with_overrides(tmp_path):
    path = write(
        tmp_path / "server.properties",
        "# broker\nbrokerid=3\nport : 9093\nlog.dir /data/kafka\nnum.threads=8\nnum.partitions=2\n",
    )
    config, warnings = load_config(path, ["port=9999", "log.level = debug", "zk.connect=a:1,b:2=c"])
    assert (config.brokerid, config.port, config.log_dir, config.num_partitions) == (3, 9999, "/data/kafka", 2)
    assert config.log_level == "DEBUG"
    assert config.zk_connect == "a:1,b:2=c"
    assert len(warnings) == 1 and warnings[0].startswith("configuration key 'num.threads' ignored")


def test_load_config_without_overrides(tmp_path):
    path = write(tmp_path / "server.properties", "num.partitions=4\n")
    config, warnings = load_config(path)
    assert config.num_partitions == 4
    assert warnings == []


def test_load_config_names_the_file_or_override_of_an_unknown_key(tmp_path):
    path = write(tmp_path / "server.properties", "num.partitions=4\nlog.retention.hour=5\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value).startswith(
        f"unknown configuration key 'log.retention.hour' in {path} (did you mean 'log.retention.hours'?)")
    path = write(tmp_path / "server.properties", "num.partitions=4\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path, ["brokerd=1"])
    assert str(refused.value).startswith(
        "unknown configuration key 'brokerd' in the --override options (did you mean 'brokerid'?)")


def test_load_config_allows_unknown_keys_from_an_override_or_the_file(tmp_path):
    path = write(tmp_path / "server.properties", "num.partitions=4\nbogus=1\n")
    config, warnings = load_config(path, ["allow.unknown.keys=true"])
    assert config.num_partitions == 4
    assert warnings == [f"unknown configuration key 'bogus' in {path} ignored (allow.unknown.keys is true)"]
    path = write(tmp_path / "server.properties", "allow.unknown.keys=true\nbogus=1\n")
    assert load_config(path)[0].allow_unknown_keys


@pytest.mark.parametrize("override", ["port", "=5", "  =5"])
def test_load_config_refuses_an_override_without_key_and_equals(tmp_path, override):
    path = write(tmp_path / "server.properties", "")
    with pytest.raises(ConfigError, match=r"^override .* is not of the form key=value"):
        load_config(path, [override])


def test_load_config_refuses_a_bad_override_value(tmp_path):
    path = write(tmp_path / "server.properties", "port=9093\n")
    with pytest.raises(ConfigError, match=r"^port: 'x' is not an integer"):
        load_config(path, ["port=x"])


def test_load_config_refuses_a_missing_file(tmp_path):
    path = str(tmp_path / "absent.properties")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert path in str(refused.value)


def test_load_config_refuses_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_config(str(tmp_path))


def test_load_config_names_the_file_of_a_malformed_escape(tmp_path):
    path = write(tmp_path / "server.properties", "port=1\nlog.dir=\\uXYZW\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert path in str(refused.value) and "line 2" in str(refused.value)


def test_load_config_refuses_a_bad_value_in_the_file(tmp_path):
    path = write(tmp_path / "server.properties", "num.partitions=0\n")
    with pytest.raises(ConfigError, match=r"^num\.partitions: 0 is below the minimum 1"):
        load_config(path)


# --------------------------------------------------------------------------------------
# with_overrides and as_properties
# --------------------------------------------------------------------------------------


def test_with_overrides_changes_only_the_given_keys():
    config = config_with(brokerid="5", topic_partition_count_map="clicks:2")
    changed = config.with_overrides({"port": "1234", "topic.partition.count.map": "views:3"})
    assert (changed.port, changed.brokerid, changed.topic_partition_count_map) == (1234, 5, {"views": 3})
    assert (config.port, config.topic_partition_count_map) == (9092, {"clicks": 2})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num.partitions": "0"}, r"^num\.partitions: 0 is below the minimum 1"),
        ({"enable.zookeeper": "true"}, r"^zk\.connect: '' is empty"),
        ({"no.such.key": "1"}, r"^no\.such\.key: unknown configuration key"),
        ({"num.threads": "4"}, r"^num\.threads: unknown configuration key"),
    ],
)
def test_with_overrides_revalidates(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config_with().with_overrides(overrides)


def test_as_properties_lists_every_key_in_registry_order():
    config = config_with(topic_log_retention_hours="a:1,b:2", enable_zookeeper="yes", zk_connect="z:1")
    properties = config.as_properties()
    assert list(properties) == [key.name for key in KEYS]
    assert properties["topic.log.retention.hours"] == "a:1,b:2"
    assert properties["enable.zookeeper"] == "true"
    assert properties["log.default.flush.interval.ms"] == "3000"
    assert all(isinstance(value, str) for value in properties.values())


def test_as_properties_round_trips_to_an_equal_config():
    config = config_with(
        brokerid="7",
        hostname="broker7.example.org",
        port="0",
        log_dir="/data/kafka",
        topic_partition_count_map="clicks:8, views:16",
        topic_log_flush_interval="clicks:5",
        topic_flush_intervals_ms="views:250",
        topic_log_retention_hours="clicks:24",
        log_retention_size="1048576",
        log_default_flush_scheduler_interval_ms="100",
        enable_zookeeper="yes",
        zk_connect="zk1:2181,zk2:2181/kafka",
        num_workers="3",
        ring_buffer_bytes="131072",
        control_socket="/run/mpbroker.sock",
        log_level="error",
    )
    again, warnings = config_from_properties(config.as_properties())
    assert warnings == []
    assert again == config
    assert again != config_with()
    assert again.log_default_flush_interval_ms == 100


def test_ops_example_configuration_lists_every_key_at_its_default():
    from pathlib import Path

    from mpbroker.config.keys import render_properties

    example = Path(__file__).resolve().parents[2] / "ops" / "server.properties"
    assert example.read_text() == render_properties(), "regenerate ops/server.properties from render_properties()"
    uncommented = {line[1:].split("=", 1)[0] for line in render_properties().splitlines()
                   if line.startswith("#") and "=" in line and not line.startswith("# ")}
    assert uncommented == {key.name for key in KEYS}
    # Uncommenting every line that has a literal default gives a loadable configuration.
    props = {}
    for line in render_properties().splitlines():
        if line.startswith("#") and "=" in line and not line.startswith("# ") and "(" not in line:
            name, value = line[1:].split("=", 1)
            props[name] = value
    config, warnings = config_from_properties(props)
    assert warnings == [] and config.port == 9092
