"""Consumer registrations (``/consumers/<group>/ids/<id>``) in the forms Kafka 0.7.1+
writes -- the static JSON map and the raw ``*N*regex`` / ``!N!regex`` filter text
(TopicCount.dbString) -- and the JSON-wrapped filter mpbroker wrote before, which is
still read. The codec is pure: these tests need no server."""

import json

import pytest

from mpbroker.clients.groups.topic_filter import Blacklist, Whitelist
from mpbroker.registry import layout
from mpbroker.registry.layout import Subscription


def test_filters_are_written_as_the_raw_text_0_7_writes():
    assert Whitelist("logs-.*").subscription(4).value() == b"*4*logs-.*"
    assert Blacklist("secret.*|tmp").subscription(1).value() == b"!1!secret.*|tmp"
    value = Whitelist("a,b").subscription(2).value()
    with pytest.raises(json.JSONDecodeError):
        json.loads(value)  # the whole node value, not JSON


def test_static_subscriptions_are_a_json_map_of_stream_counts():
    value = Subscription({"views": 1, "clicks": 2}).value()
    assert json.loads(value) == {"clicks": 2, "views": 1}
    assert layout.parse_subscription(value) == Subscription({"clicks": 2, "views": 1})


@pytest.mark.parametrize("value, expected", [
    (b"*4*whitetopic.*", Subscription({}, "whitetopic.*", True, 4)),  # TopicCount.scala's own examples
    (b"!4!blacktopic.*", Subscription({}, "blacktopic.*", False, 4)),
    (b"*1*a|b", Subscription({}, "a|b", True, 1)),  # 0.7 writes the regex with ',' already turned into '|'
    (b"*12*x*y!", Subscription({}, "x*y!", True, 12)),  # the markers may recur in the regex
    (b'{ "clicks": 2,"views": 1 }', Subscription({"clicks": 2, "views": 1})),  # StaticTopicCount.dbString
    (b'{"*3*logs-.*,audit": 3}', Subscription({}, "logs-.*,audit", True, 3)),  # mpbroker's earlier form
    (b'{"!2!secret.*": 2}', Subscription({}, "secret.*", False, 2)),
])
def test_every_form_is_read(value, expected):
    assert layout.parse_subscription(value) == expected


def test_a_read_filter_matches_whole_names_and_commas_mean_or():
    both = layout.parse_subscription(b"*3*logs-.*,audit")
    assert both.streams_for("logs-a") == 3 and both.streams_for("audit") == 3
    assert both.streams_for("xlogs-a") == 0 and both.streams_for("auditx") == 0
    black = layout.parse_subscription(b"!1!secret.*")
    assert black.streams_for("secret-x") == 0 and black.streams_for("clicks") == 1


@pytest.mark.parametrize("value", [
    b"", b"[]", b"{}", b"null", b"\xff", b"{not json",
    b'{"../x": 1}', b'{"t": 0}', b'{"t": "2"}', b'{"t": 1.5}', b'{"t": true}',
    b"*0*logs", b"*x*logs", b"*1!logs", b"!1*logs", b"*1*(", b"*", b"!!",
    b'{"*1*(": 1}', b'{"*0*x": 0}',
    b'{"version": 1, "subscription": {"t": 1}, "pattern": "static"}',  # Kafka 0.8's form: not 0.7's
])
def test_anything_else_is_refused_with_the_value_named(value):
    with pytest.raises(layout.LayoutError) as caught:
        layout.parse_subscription(value)
    assert repr(value[:200]) in str(caught.value)


def test_what_is_written_is_read_back():
    for subscription in (Subscription({"a": 1}), Whitelist("x.*").subscription(2), Blacklist("_.*").subscription(3)):
        assert layout.parse_subscription(subscription.value()) == subscription
