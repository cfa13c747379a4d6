"""The audit trail: the envelope codec, windows and the event codec, the ledger's
arithmetic (pure); then producers that stamp and count, consumers that strip, and
``mpbroker-audit`` against real clusters -- within one cluster, and across a mirror
that skipped a batch."""

import io
import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.cli.audit import AuditWindowError, audit
from mpbroker.cli.audit import main as audit_main
from mpbroker.cli.console_consumer import main as console_consumer_main
from mpbroker.cli.console_producer import main as console_producer_main
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.audit.ledger import AuditLedger
from mpbroker.clients.core import envelope
from mpbroker.clients.core.audit_events import (
    AuditEvent,
    AuditEventError,
    decode_event,
    enclosing_window,
    encode_event,
    format_duration_ms,
    parse_duration_ms,
    smallest_fitting_window,
    window_start,
)
from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.mirror.mirror_maker import Mirror
from mpbroker.registry import layout
from tests.clients.helpers import HOST, PARTITIONS, wait_for
from tests.clients.mirror.test_mirror import FAST_GROUP, clusters, mirror_config, payloads

names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60).filter(
    lambda s: 0 < len(s.encode()) <= 255)


# --- the envelope codec ------------------------------------------------------------------

@given(st.binary(max_size=300), st.integers(-2**63, 2**63 - 1), st.integers(0, 2**63 - 1), names, names)
def test_an_envelope_round_trips(payload, created_ms, sequence, host, client):
    wrapped = envelope.wrap(payload, created_ms, sequence, host, client)
    assert envelope.is_enveloped(wrapped)
    assert envelope.open_envelope(wrapped) == envelope.Envelope(created_ms, sequence, host, client, payload)
    assert envelope.strip(wrapped) == payload
    assert envelope.created_ms(wrapped) == created_ms
    assert envelope.open_envelope(wrapped + b"more").payload == payload + b"more"  # the payload is the rest


@given(st.binary(max_size=200).filter(lambda b: not b.startswith(envelope.MAGIC)))
def test_a_payload_without_the_magic_passes_through_untouched(payload):
    assert envelope.open_envelope(payload) is None
    assert envelope.strip(payload) is payload


def test_text_and_json_never_look_like_an_envelope():
    for text in ("", "{}", '{"a": 1}', "GET /index.html", "\ufeffbom", "þAUD"):  # þ is 0xC3 0xBE in UTF-8
        assert envelope.open_envelope(text.encode()) is None


def test_a_truncated_or_unknown_envelope_is_a_clear_error():
    wrapped = envelope.wrap(b"data", 1700000000000, 5, "web-7", "4711-abcdef")
    header_size = len(wrapped) - len(b"data")
    for cut in range(4, header_size):  # every cut inside the header, once the magic is whole
        with pytest.raises(envelope.EnvelopeError, match="truncated"):
            envelope.open_envelope(wrapped[:cut])
    newer = wrapped[:4] + b"\x02" + wrapped[5:]
    with pytest.raises(envelope.EnvelopeError, match="version 2"):
        envelope.open_envelope(newer)
    with pytest.raises(envelope.EnvelopeError, match="host is empty"):
        envelope.open_envelope(wrapped[:envelope.FIXED_SIZE] + b"\x00" + wrapped[envelope.FIXED_SIZE + 1:])
    with pytest.raises(ValueError, match="host"):
        envelope.wrap(b"", 0, 0, "h" * 256, "c")


# --- windows, durations, events --------------------------------------------------------------

def test_windows_are_aligned_on_the_epoch_and_nest():
    assert window_start(60_000, 60_000) == 60_000
    assert window_start(119_999, 60_000) == 60_000
    assert window_start(-1, 1000) == -1000  # floor, also before the epoch
    assert enclosing_window(61_000, 1_000, 60_000) == 60_000  # a second inside its minute
    assert enclosing_window(60_000, 60_000, 60_000) == 60_000
    assert enclosing_window(60_000, 60_000, 90_000) is None  # 90 s is no multiple of 60 s
    assert enclosing_window(500, 1_000, 60_000) is None  # not a window start
    assert [parse_duration_ms(t) for t in ("1m", "30s", "500ms", "2h", "1d", "250", "1.5s")] == \
        [60_000, 30_000, 500, 7_200_000, 86_400_000, 250, 1500]
    for bad in ("", "m", "1 week", "-1s", "0.5ms"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)
    assert [format_duration_ms(ms) for ms in (10_000, 60_000, 90_000, 1_500, 7_200_000, 86_400_000, 0)] == \
        ["10s", "1m", "90s", "1500ms", "2h", "1d", "0ms"]
    # the smallest window of at least the one asked for that every producer's window fits in
    assert [smallest_fitting_window(asked, producers) for asked, producers in
            [(7_000, [10_000]), (25_000, [10_000]), (60_000, [10_000]), (1_000, [10_000, 15_000]), (1, [1])]] == \
        [10_000, 30_000, 60_000, 30_000, 1]


@given(st.integers(1, 10**9))
def test_a_formatted_duration_reads_back(milliseconds):
    assert parse_duration_ms(format_duration_ms(milliseconds)) == milliseconds


@given(st.integers(0, 2**40), st.integers(0, 2**40), st.sampled_from([1, 7, 1000, 60_000]))
def test_a_time_falls_in_exactly_its_window(time_ms, other_ms, window_ms):
    start = window_start(time_ms, window_ms)
    assert start <= time_ms < start + window_ms and start % window_ms == 0
    assert (window_start(other_ms, window_ms) == start) == (start <= other_ms < start + window_ms)


def test_audit_events_round_trip_and_refuse_other_messages():
    event = AuditEvent("web-7", "4711-abcdef", 3, 1_700_000_040_000, 60_000, {"clicks": 12, "views": 0},
                       1_700_000_105_000)
    assert decode_event(encode_event(event)) == event
    assert json.loads(encode_event(event))["type"] == "mpbroker.audit"
    for bad in (b"", b"not json", b"[]", b'{"type": "other"}', b'{"type": "mpbroker.audit", "version": 9}',
                encode_event(event).replace(b'"clicks":12', b'"clicks":-1'),
                encode_event(event).replace(b'"event":3', b'"event":"3"')):
        with pytest.raises(AuditEventError):
            decode_event(bad)


# --- the ledger -------------------------------------------------------------------------------

def test_the_ledger_compares_per_producer_and_per_complete_window():
    ledger = AuditLedger("t", 60_000)
    for number, (client, start, count) in enumerate([("a", 0, 3), ("a", 59_000, 0), ("b", 0, 2),
                                                     ("a", 60_000, 2), ("a", 120_000, 1)]):
        ledger.add_event(AuditEvent("h", client, number, start, 1_000, {"t": count, "other": 9}, 0))
    ledger.add_event(AuditEvent("h", "a", 0, 0, 1_000, {"t": 3}, 0))  # the same event again
    ledger.add_event(AuditEvent("h", "a", 99, 0, 1_000, {"other": 5}, 0))  # no count for t
    for sequence, created in enumerate([10, 20, 59_999, 59_999]):  # a's 3 of window 0, one of them twice
        ledger.add_message(created, "h", "a", min(sequence, 2))
    ledger.add_message(5, "h", "b", 0)  # b: 2 produced, 1 arrived
    ledger.add_message(5, "h", "b", 1)
    ledger.add_message(60_001, "h", "a", 10)  # a: 2 produced in window 60 s, 3 arrived
    ledger.add_message(60_002, "h", "a", 11)
    ledger.add_message(60_003, "h", "a", 12)
    ledger.add_event(AuditEvent("h", "b", 7, 0, 1_000, {"t": 0}, 0))
    ledger.add_event(AuditEvent("h", "b", 8, 60_000, 45_000, {"t": 4}, 0))  # 45 s does not fit 60 s windows
    ledger.add_message(0, "h", "b", 5)  # b's second message of window 0 came through after all

    reports = {r.start_ms: r for r in ledger.report(now_ms=184_999, grace_ms=5_000)}
    assert ledger.duplicate_events == 1 and len(ledger.misaligned_events) == 1
    assert ledger.unfit_producers() == {("h", "b"): 45_000}  # 60 s is no multiple of b's 45 s
    zero = reports[0]
    assert (zero.produced, zero.received, zero.duplicates, zero.status) == (5, 6, 1, "extra")
    assert [(p.client, p.produced, p.received) for p in zero.producers] == [("a", 3, 3), ("b", 2, 3)]
    assert (reports[60_000].produced, reports[60_000].received, reports[60_000].status) == (2, 3, "extra")
    assert reports[120_000].status == "open"  # ends at 180 s: complete at 180 s + the grace of 5 s
    assert ledger.report(now_ms=185_000, grace_ms=5_000)[-1].status == "missing"  # 1 produced, none arrived
    assert [r.start_ms for r in ledger.report(185_000, 0, since_ms=100_000)] == [60_000, 120_000]


def test_a_window_that_matches_for_every_producer_is_ok():
    ledger = AuditLedger("t", 1000)
    ledger.add_event(AuditEvent("h", "a", 0, 0, 1000, {"t": 2}, 0))
    ledger.add_message(1, "h", "a", 0)
    ledger.add_message(999, "h", "a", 1)
    ledger.add_message(999, "h", "a", 1)
    (report,) = ledger.report(now_ms=1000, grace_ms=0)
    assert (report.status, report.discrepancy, report.duplicates) == ("ok", False, 1)
    ledger.add_message(2, "h", "a", 2)  # one the producer did not count
    assert ledger.report(1000, 0)[0].status == "extra"


# --- against clusters ---------------------------------------------------------------------------

AUDITED = {"audit.envelope": "true", "audit.window.ms": 1000}


@pytest.fixture
def make_cluster(zookeeper_factory, broker_factory):
    yield from clusters(zookeeper_factory, broker_factory)


def wait_for_audit_counts(cluster, topic: str, messages: int) -> list:
    """Until the audit topic is registered (the audit reads registered partitions) and its
    fetchable events count ``messages`` of ``topic``; returns the events."""
    def counted():
        events = [json.loads(p) for p in cluster.read_all("_audit")]
        return cluster.registered("_audit") and sum(e["counts"].get(topic, 0) for e in events) >= messages and events
    return wait_for(counted, 15, 0.05, f"the audit events of {messages} messages of {topic}")


def complete_audit(zk_connect: str, topic: str, **kwargs) -> dict:
    """Run the audit until no window of ``topic`` is open any more (windows of 1 s, no grace)."""
    return wait_for(lambda: (r := audit(zk_connect, [topic], 1000, grace_ms=0, **kwargs))
                    and r["topics"][0]["windows"] and all(w["status"] != "open" for w in r["topics"][0]["windows"])
                    and r, 30, 0.2, f"every audit window of {topic} complete")


def test_producers_stamp_and_count_consumers_strip_and_the_audit_matches(make_cluster, capsysbinary):
    cluster = make_cluster("a")
    sync = cluster.producer(**AUDITED)
    asynchronous = cluster.producer(**AUDITED, **{"producer.type": "async", "queue.time": 50})
    plain = cluster.producer()
    sent = []
    for index in range(300):
        for name, producer in ((b"sync", sync), (b"async", asynchronous)):
            payload = b"%s-%d" % (name, index)
            producer.send("views", payload, key=b"%d" % index)
            sent.append(payload)
    plain.send("views", b"not audited")
    for producer in (sync, asynchronous, plain):
        producer.close()  # publishes every count, the current window's too
    assert console_producer_main(["--zookeeper", cluster.zk_connect, "--topic", "views", "--acks", "append",
                                  "--audit", "--audit-window-ms", "1000"], stdin=io.BytesIO(b"line-1\nline-2\n")) == 0
    sent += [b"line-1", b"line-2"]
    assert sync.auditor.client != asynchronous.auditor.client and sync.auditor.events_published >= 1

    # Consumers: raw, the envelope is there; asked to strip it, the payload comes back as sent.
    raw = wait_for(lambda: (r := cluster.read_all("views")) and len(r) >= len(sent) + 1 and r, 10, 0.05,
                   "everything acknowledged flushed (fetchable)")
    assert sum(map(envelope.is_enveloped, raw)) == 602 and b"not audited" in raw
    assert sorted(cluster.read_all("views", strip=True)) == sorted(sent + [b"not audited"])
    with SimpleConsumer(HOST, cluster.broker.port, audit_envelope=True) as consumer:
        stamped = [m for p in range(PARTITIONS) for m in consumer.messages("views", p, 0) if m.envelope]
    producers = {(m.envelope.host, m.envelope.client) for m in stamped}
    assert len(producers) == 3 and producers >= {  # the console producer is the third
        (sync.auditor.host, sync.auditor.client), (asynchronous.auditor.host, asynchronous.auditor.client)}
    assert sorted(m.envelope.sequence for m in stamped if m.envelope.client == sync.auditor.client) == list(range(300))

    connector = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "strip", "audit.envelope": "true",
                                   "consumer.timeout.ms": 5000, **FAST_GROUP})
    try:
        (stream,) = connector.create_message_streams({"views": 1})["views"]
        got = [next(stream) for _ in range(603)]
    finally:
        connector.shutdown()
    assert sorted(m.payload for m in got) == sorted(sent + [b"not audited"])
    assert sum(m.envelope is not None for m in got) == 602

    assert console_consumer_main(["--broker-list", f"{HOST}:{cluster.broker.port}", "--topic", "views",
                                  "--from-beginning", "--timeout-ms", "300", "--strip-envelopes"]) == 0
    printed = capsysbinary.readouterr().out.splitlines()
    assert sorted(printed) == sorted(sent + [b"not audited"])

    # The audit topic holds the producers' counts; the audit finds them equal to what arrived.
    events = wait_for_audit_counts(cluster, "views", 602)
    assert sum(e["counts"]["views"] for e in events) == 602
    result = complete_audit(cluster.zk_connect, "views")
    (report,) = result["topics"]
    assert result["problems"] == 0 and report["unstamped"] == 1
    assert sum(w["produced"] for w in report["windows"]) == sum(w["received"] for w in report["windows"]) == 602

    # Counts published for messages that never arrived: a discrepancy, in that window, of that size.
    with cluster.producer(acks="flush") as forger:  # flushed: fetchable once acknowledged
        first = report["windows"][0]
        forger.send("_audit", encode_event(AuditEvent("ghost", "1-000000", 0, first["start_ms"], 1000,
                                                      {"views": 7}, first["end_ms"])))
    out = io.StringIO()
    code = _run_tool(["--zookeeper", cluster.zk_connect, "--topic", "views", "--window", "1s", "--grace", "0s"], out)
    assert code == 1
    assert "MISSING +7" in out.getvalue() and "ghost/1-000000" in out.getvalue()
    flagged = [w for w in audit(cluster.zk_connect, ["views"], 1000, grace_ms=0)["topics"][0]["windows"]
               if w["status"] != "ok"]
    assert [(w["start_ms"], w["produced"] - w["received"]) for w in flagged] == [(first["start_ms"], 7)]


def test_a_damaged_envelope_is_a_clear_error_that_consumers_can_step_over(make_cluster):
    cluster = make_cluster("a")
    good = envelope.wrap(b"good", 1000, 0, "h", "c")
    damaged = good[:envelope.FIXED_SIZE + 2]  # the host's length says 1 byte, then the message ends
    with cluster.producer(acks="flush") as producer:
        producer.send("mixed", [b"plain", damaged, good])  # no key: one partition, in this order
    (partition,) = [p for p, payloads in cluster.read("mixed").items() if payloads]
    with SimpleConsumer(HOST, cluster.broker.port, audit_envelope=True) as consumer:
        with pytest.raises(envelope.EnvelopeError, match="truncated") as caught:
            list(consumer.messages("mixed", partition, 0))
        assert (caught.value.topic, caught.value.partition) == ("mixed", partition)
        rest = list(consumer.messages("mixed", partition, caught.value.next_offset))  # resume after it
    assert [(m.payload, m.envelope) for m in rest] == [(b"good", envelope.open_envelope(good))]

    connector = ConsumerConnector({"zk.connect": cluster.zk_connect, "groupid": "damaged", "audit.envelope": "true",
                                   "consumer.timeout.ms": 5000, **FAST_GROUP})
    try:
        (stream,) = connector.create_message_streams({"mixed": 1})["mixed"]
        assert next(stream).payload == b"plain"
        with pytest.raises(envelope.EnvelopeError):
            next(stream)
        assert next(stream).payload == b"good"  # the damaged one was handed out: the stream goes on
    finally:
        connector.shutdown()

    result = audit(cluster.zk_connect, ["mixed"], 1000, grace_ms=0)
    (report,) = result["topics"]
    assert (report["malformed"], report["unstamped"]) == (1, 1) and result["problems"] >= 1


def _run_tool(argv, out) -> int:
    import contextlib
    with contextlib.redirect_stdout(out):
        return audit_main(argv)


def test_the_audit_across_a_mirror_finds_a_batch_the_mirror_skipped(make_cluster):
    source, target = make_cluster("a"), make_cluster("b")
    config = mirror_config([source], target, "events")
    # Acknowledged once flushed: what was sent is fetchable, so the log ends below include it.
    producer = source.producer(**AUDITED, **{"producer.type": "async", "acks": "flush", "queue.time": 20})
    before = payloads("before", 400)
    for index, payload in enumerate(before):
        producer.send("events", payload, key=b"%d" % index)
    with Mirror(config):
        wait_for(lambda: len(target.read_all("events")) >= len(before), 30, 0.1, "the first batch mirrored")

    skipped = payloads("skipped", 150)  # produced while the mirror is down ...
    for index, payload in enumerate(skipped):
        producer.send("events", payload, key=b"%d" % index)
    assert producer.flush(30)
    # ... and skipped: an operator moves the mirror's offsets to the log ends.
    with SimpleConsumer(HOST, source.broker.port) as consumer:
        for partition in range(PARTITIONS):
            path = layout.offset_path(config.group, "events", layout.PartitionId(1, partition))
            source.zk.set(path, str(consumer.latest_offset("events", partition)).encode())
    after = payloads("after", 250)
    for index, payload in enumerate(after):
        producer.send("events", payload, key=b"%d" % index)
    producer.close()
    with Mirror(config):
        wait_for(lambda: len(target.read_all("events")) >= len(before) + len(after), 30, 0.1,
                 "the last batch mirrored")
    assert sorted(target.read_all("events", strip=True)) == sorted(before + after)

    wait_for_audit_counts(source, "events", len(before) + len(skipped) + len(after))
    clean = complete_audit(source.zk_connect, "events")  # at the source itself nothing is missing
    assert clean["problems"] == 0, json.dumps(clean, indent=1)
    result = complete_audit(target.zk_connect, "events", sources=[source.zk_connect])
    windows = result["topics"][0]["windows"]
    assert result["problems"] >= 1 and {w["status"] for w in windows} <= {"ok", "missing"}
    assert sum(w["produced"] - w["received"] for w in windows) == len(skipped)
    assert sum(w["produced"] for w in windows) == len(before) + len(skipped) + len(after)
    assert audit_main(["--zookeeper", target.zk_connect, "--source-zookeeper", source.zk_connect,
                       "--topic", "events", "--window", "1s", "--grace", "0s", "--json"]) == 1


def test_an_event_off_its_own_window_grid_is_kept_apart_from_producers_whose_window_does_not_fit():
    ledger = AuditLedger("t", 20_000)
    ledger.add_event(AuditEvent("h", "fits", 0, 10_000, 10_000, {"t": 1}, 0))
    ledger.add_event(AuditEvent("h", "off-grid", 0, 5_000, 10_000, {"t": 1}, 0))  # 5 s is no start of 10 s windows
    ledger.add_event(AuditEvent("h", "wide", 0, 0, 30_000, {"t": 1}, 0))
    ledger.add_event(AuditEvent("h", "other-topic", 0, 0, 7_000, {"u": 1}, 0))  # counts no message of t
    assert ledger.events == 1 and len(ledger.misaligned_events) == 2
    assert ledger.unfit_producers() == {("h", "wide"): 30_000}


def test_the_audit_tool_refuses_bad_arguments_and_reports_unreachable_zookeeper(capsys):
    assert audit_main(["--zookeeper", "127.0.0.1:1", "--topic", "t", "--window", "1 week"]) == 2
    assert audit_main(["--zookeeper", "127.0.0.1:1", "--topic", "../t"]) == 2
    # what a user types when a second topic goes wrong: never an audit of the first alone
    for typed in (["--topic", "t", "--topic"], ["--topic", "t", "u"], ["--topic", "t,u"], ["--topic", "t", "--topic="]):
        assert audit_main(["--zookeeper", "127.0.0.1:1", *typed]) == 2, typed
        assert capsys.readouterr().err.strip()
    assert audit_main(["--zookeeper", "127.0.0.1:1", "--topic", "t", "--zk-timeout-ms", "300"]) == 3
    assert "unreachable" in capsys.readouterr().err


def test_producer_audit_settings_are_checked():
    with pytest.raises(ValueError, match="audit.envelope"):
        Producer(broker_list="127.0.0.1:1", audit_envelope="yes")
    with pytest.raises(ValueError, match="audit.topic"):
        Producer(broker_list="127.0.0.1:1", audit_topic="../x")
    with pytest.raises(ValueError, match="audit.window.ms"):
        Producer(broker_list="127.0.0.1:1", audit_window_ms=0)


# --- windows that do not fit, unknown topics, notes --------------------------------------------

def _produce_audited(cluster, topic: str, count: int, window_ms: int):
    """``count`` messages of an audited producer with windows of ``window_ms``, flushed;
    returns "host/client" once its events count them all and the topic is registered."""
    with cluster.producer(**{"audit.envelope": "true", "audit.window.ms": window_ms, "acks": "flush"}) as producer:
        for index in range(count):
            producer.send(topic, b"%s-%d" % (topic.encode(), index), key=b"%d" % index)
        name = f"{producer.auditor.host}/{producer.auditor.client}"
    wait_for_audit_counts(cluster, topic, count)
    wait_for(lambda: cluster.registered(topic), 15, 0.05, f"{topic} registered")
    return name


def _tool(argv, capsys) -> tuple:
    code = audit_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_window_that_is_no_multiple_of_the_producers_and_an_unknown_topic_exit_2(make_cluster, capsys):
    cluster = make_cluster("a")
    producer = _produce_audited(cluster, "page-views", 50, 10_000)
    zk = cluster.zk_connect
    common = ["--zookeeper", zk, "--grace", "0s"]

    # 7 s windows against the producer's 10 s: refused, naming its window (no table of EXTRA rows)
    code, out, err = _tool([*common, "--topic", "page-views", "--window", "7s"], capsys)
    assert (code, out) == (2, "")
    assert (f"--window 7s (7000 ms) must be a multiple of the producers' audit.window.ms, which is 10000 ms (10s) "
            f"for {producer}: try --window 10s") in err
    code, out, err = _tool([*common, "--topic", "page-views", "--window", "25s"], capsys)
    assert (code, out) == (2, "") and "try --window 30s" in err
    with pytest.raises(AuditWindowError):
        audit(zk, ["page-views"], 7_000)
    code, out, err = _tool([*common, "--topic", "page-views", "--window", "20s"], capsys)
    assert code == 0 and "OK: no discrepancy" in out, out + err

    # a misspelled topic: refused with the registered name it is close to
    code, out, err = _tool([*common, "--topic", "page-veiws", "--window", "10s"], capsys)
    assert (code, out) == (2, "")
    assert (f"unknown topic 'page-veiws' (did you mean 'page-views'?): not registered at {zk}, and no audit "
            f"event at {zk} (_audit) counts it; --allow-missing-topics reports it as empty") in err
    code, out, err = _tool([*common, "--topic", "page-views", "--topic", "page-veiws", "--window", "10s"], capsys)
    assert code == 2 and "'page-veiws'" in err and "topic 'page-views'" not in err
    code, out, err = _tool([*common, "--topic", "page-veiws", "--window", "10s", "--allow-missing-topics"], capsys)
    assert code == 0, out + err
    assert f"note: page-veiws: not registered at {zk} and counted by no audit event" in out
    with pytest.raises(UnknownTopicError):
        audit(zk, ["page-veiws"], 10_000)
    code, out, err = _tool(["--zookeeper", zk + "-typo", "--topic", "page-views"], capsys)  # a chroot with nothing
    assert (code, out) == (2, "") and "is the chroot right?" in err

    # a topic the events count but that never arrived is no typo: its window is MISSING
    start = window_start(int(time.time() * 1000) - 60_000, 10_000)
    with cluster.producer(acks="flush") as forger:
        forger.send("_audit", encode_event(AuditEvent("ghost", "1-000000", 0, start, 10_000, {"lost": 7},
                                                      start + 10_000)))
    wait_for_audit_counts(cluster, "lost", 7)
    code, out, err = _tool([*common, "--topic", "lost", "--window", "10s"], capsys)
    assert code == 1 and "MISSING +7" in out, out + err


def test_an_event_off_its_window_grid_gets_a_note_that_says_so(make_cluster):
    """The first note must not say that no audit event counts the topic when one does."""
    cluster = make_cluster("a")
    start = window_start(int(time.time() * 1000) - 60_000, 10_000)
    with cluster.producer(acks="flush") as producer:
        producer.send("clicks", [envelope.wrap(b"click-%d" % i, start + 1_000 + i, i, "web-1", "1-abcdef")
                                 for i in range(3)])
        producer.send("_audit", encode_event(AuditEvent("web-1", "1-abcdef", 4, start + 5_000, 10_000, {"clicks": 3},
                                                        start + 20_000)))
    wait_for_audit_counts(cluster, "clicks", 3)
    wait_for(lambda: cluster.registered("clicks"), 15, 0.05, "clicks registered")

    result = audit(cluster.zk_connect, ["clicks"], 10_000, grace_ms=0)

    assert result["notes"][0] == (f"clicks: producer web-1/1-abcdef published event 4 for a window starting at "
                                  f"{start + 5_000}, not a start of its windows of 10000 ms: its count (3) was "
                                  f"left out (a damaged event?)")
    assert not any("no audit event counts" in note for note in result["notes"])
    assert result["problems"] >= 1 and result["topics"][0]["misaligned_events"] == 1
