"""``mpbroker-audit``: does every message the producers sent arrive? Per window,
produced (the producers' audit events) versus received (the topic's messages, by the
creation time in their envelopes).

    mpbroker-audit --zookeeper ZK --topic T [--topic T2 ...] [--window 1m]
        [--source-zookeeper ZK_A ...] [--audit-topic _audit] [--grace DURATION]
        [--since DURATION] [--json] [--allow-missing-topics]
        [--zk-timeout-ms N] [--broker-timeout-ms N]

Reads, once, every partition of each topic at ``--zookeeper`` (up to the log ends at
the start of the read) and opens each message's audit envelope; reads the audit
topic's events -- at the same cluster, or, with ``--source-zookeeper`` (repeatable),
at the source clusters a mirror copies from: the producers wrote their events there,
and reading them at the source makes the count independent of the mirror being
audited (the mirror may or may not copy the audit topic; its copy is not read).
Then reports each window of ``--window`` (windows are aligned on the epoch, times
shown in UTC), judging only complete windows: ended at least ``--grace`` ago
(default: one window). ``--window`` must be a multiple of every producer's
``audit.window.ms`` (a producer's window must lie inside one of ours): a window that
is not is refused once the events are read, naming the producers' windows.

A ``--topic`` that is not registered at ``--zookeeper`` and that no audit event counts
is refused with the closest known names (a typo must not read "OK"), unless
``--allow-missing-topics``: then it is reported empty, with a note. A topic the events
count but that never arrived is no typo: its windows are MISSING.

A window is flagged when, for some producer, the distinct messages received differ
from the count it published (``mpbroker.clients.audit.ledger``); duplicates (redelivery by an
at-least-once mirror) are shown but are not a discrepancy. Messages without an
envelope are counted as not audited. ``--since 2h`` reports only the windows of the
last two hours (older messages may be gone with retention).

Exit codes: 0 every complete window matches; 1 a discrepancy (or a damaged envelope,
or an audit event whose window start is off its own grid); 2 bad arguments, an
unknown topic, or a ``--window`` that is no multiple of the producers' windows; 3 no
ZooKeeper answered.
"""

import argparse
import contextlib
import datetime
import json
import logging
import sys
import time

from mpbroker.cli.failure import fail
from mpbroker.clients.audit.cluster_reader import BROKER_TIMEOUT_MS, ZK_TIMEOUT_MS, ClusterReader
from mpbroker.clients.audit.ledger import OPEN, AuditLedger
from mpbroker.clients.core.audit_events import (
    AuditEventError,
    decode_event,
    format_duration_ms,
    parse_duration_ms,
    smallest_fitting_window,
)
from mpbroker.clients.core.envelope import MAGIC, EnvelopeError, open_envelope
from mpbroker.clients.core.unknown_topics import UnknownTopicError, close_matches
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable

EXIT_OK, EXIT_DISCREPANCY, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PROG = "mpbroker-audit"
DEFAULT_AUDIT_TOPIC = "_audit"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="compare produced and received counts per window")
    parser.add_argument("--zookeeper", metavar="ZK", required=True,
                        help="zk.connect of the cluster whose topic is audited (where messages are received)")
    parser.add_argument("--topic", action="append", required=True, help="the topic to audit (repeatable)")
    parser.add_argument("--window", default="1m", help="window size: 1m, 30s, 5m, ... (default 1m)")
    parser.add_argument("--source-zookeeper", metavar="ZK", action="append", default=[],
                        help="read the audit events at this source cluster (repeatable) instead of --zookeeper")
    parser.add_argument("--audit-topic", default=DEFAULT_AUDIT_TOPIC,
                        help=f"the producers' audit.topic (default {DEFAULT_AUDIT_TOPIC})")
    parser.add_argument("--grace", help="judge a window once it ended this long ago (default: one window)")
    parser.add_argument("--since", help="report only the windows of this last stretch of time, e.g. 2h")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--allow-missing-topics", action="store_true",
                        help="a --topic neither registered at --zookeeper nor counted by any audit event is "
                             "reported as empty (with a note) instead of refused with exit 2")
    parser.add_argument("--zk-timeout-ms", type=int, default=ZK_TIMEOUT_MS,
                        help=f"how long to wait for each ZooKeeper before exit 3, in ms (default {ZK_TIMEOUT_MS})")
    parser.add_argument("--broker-timeout-ms", type=int, default=BROKER_TIMEOUT_MS,
                        help=f"connect and read timeout for each broker, in ms (default {BROKER_TIMEOUT_MS})")
    return parser


def _check(args) -> dict:
    """The parsed durations; ValueError on a bad argument."""
    window_ms = parse_duration_ms(args.window)
    if window_ms <= 0:
        raise ValueError("--window must be positive")
    grace_ms = window_ms if args.grace is None else parse_duration_ms(args.grace)
    since_ms = None if args.since is None else parse_duration_ms(args.since)
    for zk_connect in [args.zookeeper, *args.source_zookeeper]:
        layout.split_zk_connect(zk_connect)
    try:
        for topic in [*args.topic, args.audit_topic]:
            check_topic(topic)
    except InvalidTopicError as exc:
        raise ValueError(str(exc)) from None
    if args.zk_timeout_ms < 1 or args.broker_timeout_ms < 1:
        raise ValueError("timeouts must be >= 1 ms")
    return {"window_ms": window_ms, "grace_ms": grace_ms, "since_ms": since_ms}


class AuditWindowError(ValueError):
    """``--window`` is no multiple of some producer's ``audit.window.ms``."""


def audit(zookeeper: str, topics: list, window_ms: int, *, sources=(), audit_topic: str = DEFAULT_AUDIT_TOPIC,
          grace_ms: int | None = None, since_ms: int | None = None, zk_timeout_ms: int = ZK_TIMEOUT_MS,
          broker_timeout_ms: int = BROKER_TIMEOUT_MS, now_ms: int | None = None,
          allow_missing_topics: bool = False) -> dict:
    """The audit as a dict (what ``--json`` prints); ZooKeeperUnavailable if a cluster
    does not answer; AuditWindowError if ``window_ms`` is no multiple of a producer's
    window; UnknownTopicError for a topic that is neither registered at ``zookeeper``
    nor counted by any audit event (unless ``allow_missing_topics``: then a note)."""
    grace_ms = window_ms if grace_ms is None else grace_ms
    ledgers = {topic: AuditLedger(topic, window_ms) for topic in dict.fromkeys(topics)}
    event_clusters = list(dict.fromkeys(sources)) or [zookeeper]
    notes = []
    # The audited cluster first (unreachable: fail at once); then the events, which
    # decide whether the window fits before a whole topic is read; then the topics.
    with ClusterReader(zookeeper, zk_timeout_ms=zk_timeout_ms, broker_timeout_ms=broker_timeout_ms) as reader:
        counted, missing_audit_topic = _read_events(reader, event_clusters, audit_topic, ledgers, notes,
                                                    zk_timeout_ms, broker_timeout_ms)
        _refuse_unfit_window(ledgers, window_ms)
        registered = reader.topics()
        unknown = [topic for topic in ledgers if topic not in registered and topic not in counted]
        if unknown and not allow_missing_topics:
            where = (f"not registered at {zookeeper}, and no audit event at {', '.join(event_clusters)} "
                     f"({audit_topic}) counts it")
            if not registered:
                where += f" (no topic is registered at {zookeeper} at all: is the chroot right?)"
            raise UnknownTopicError(unknown, where, [*registered, *counted], "--allow-missing-topics reports it as empty")
        for topic in unknown:
            notes.append(f"{topic}: not registered at {zookeeper} and counted by no audit event: "
                         f"nothing to compare (--allow-missing-topics)")
        for topic, ledger in ledgers.items():
            if topic not in unknown:
                for payloads in reader.read_topic(topic):
                    _count_received(ledger, payloads)
        notes += reader.notes
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    since = None if since_ms is None else now_ms - since_ms
    results = []
    for topic, ledger in ledgers.items():
        windows = ledger.report(now_ms, grace_ms, since)
        problems = sum(w.discrepancy for w in windows) + bool(ledger.malformed) + bool(ledger.misaligned_events)
        results.append({
            "topic": topic, "window_ms": window_ms, "windows": [w.as_dict() for w in windows],
            "complete_windows": sum(w.status != OPEN for w in windows),
            "discrepancies": sum(w.discrepancy for w in windows), "unstamped": ledger.unstamped,
            "malformed": ledger.malformed, "events": ledger.events, "duplicate_events": ledger.duplicate_events,
            "misaligned_events": len(ledger.misaligned_events), "problems": problems,
        })
        if topic not in counted and (ledger.unstamped or any(w.received for w in windows)):
            note = (f"{topic}: no audit event counts this topic at {', '.join(event_clusters)} ({audit_topic}): "
                    f"are its producers audited (audit.envelope=true), and are --audit-topic and "
                    f"--source-zookeeper right?")
            if missing_audit_topic:
                absent_at, known = missing_audit_topic
                guess = close_matches(audit_topic, known)
                note += (f" The audit topic {audit_topic!r} is not registered at {', '.join(absent_at)}"
                         + (f" (did you mean {' or '.join(map(repr, guess))}?)" if guess else "") + ".")
            notes.append(note)
        for event in ledger.misaligned_events[:5]:  # windows that fit, but a start off their own grid
            notes.append(f"{topic}: producer {event.host}/{event.client} published event {event.event} for a "
                         f"window starting at {event.window_start_ms}, not a start of its windows of "
                         f"{event.window_ms} ms: its count ({event.counts[topic]}) was left out (a damaged event?)")
    return {"zookeeper": zookeeper, "audit_sources": event_clusters, "audit_topic": audit_topic,
            "now_ms": now_ms, "grace_ms": grace_ms, "topics": results, "notes": notes,
            "problems": sum(r["problems"] for r in results)}


def _read_events(reader: ClusterReader, clusters: list, audit_topic: str, ledgers: dict, notes: list,
                 zk_timeout_ms: int, broker_timeout_ms: int) -> tuple:
    """Feed the audit events at ``clusters`` to the ledgers (``reader`` reads the audited
    cluster, also one of them when no source is named). Returns the topics the events
    count, and, if the audit topic is not registered at some of the clusters, (those
    clusters, the topics registered there)."""
    counted = set()
    bad_events = 0
    absent_at, known = [], set()
    for cluster in clusters:
        with contextlib.ExitStack() as stack:
            events = reader if cluster == reader.zk_connect else stack.enter_context(
                ClusterReader(cluster, zk_timeout_ms=zk_timeout_ms, broker_timeout_ms=broker_timeout_ms))
            registered = events.topics()
            if audit_topic not in registered:
                absent_at.append(cluster)
                known.update(registered)
            for payloads in events.read_topic(audit_topic):
                for payload in payloads:
                    try:
                        event = decode_event(payload)
                    except AuditEventError:
                        bad_events += 1
                        continue
                    counted.update(event.counts)
                    for ledger in ledgers.values():
                        ledger.add_event(event)
            if events is not reader:  # the audited cluster's notes are added with those of its topics
                notes += events.notes
    if bad_events:
        notes.append(f"{bad_events} message(s) of {audit_topic} are not audit events (ignored)")
    return counted, ((absent_at, known) if absent_at else None)


def _refuse_unfit_window(ledgers: dict, window_ms: int) -> None:
    """AuditWindowError naming the producers' windows when ``window_ms`` is no multiple
    of them: their counts cannot be split over our windows, so every message of theirs
    would read as extra."""
    unfit = {}  # producer window -> {"host/client"}
    for ledger in ledgers.values():
        for (host, client), their_ms in ledger.unfit_producers().items():
            unfit.setdefault(their_ms, set()).add(f"{host}/{client}")
    if not unfit:
        return
    described = "; ".join(f"{their_ms} ms ({format_duration_ms(their_ms)}) for {_some(producers)}"
                          for their_ms, producers in sorted(unfit.items()))
    fitting = smallest_fitting_window(window_ms, unfit)
    raise AuditWindowError(f"--window {format_duration_ms(window_ms)} ({window_ms} ms) must be a multiple of the "
                           f"producers' audit.window.ms, which is {described}: try --window "
                           f"{format_duration_ms(fitting)}")


def _some(producers: set, shown: int = 3) -> str:
    names = sorted(producers)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _count_received(ledger: AuditLedger, payloads: list) -> None:
    add = ledger.add_message
    for payload in payloads:
        if payload[:4] != MAGIC:
            ledger.unstamped += 1
            continue
        try:
            envelope = open_envelope(payload)
        except EnvelopeError:
            ledger.malformed += 1
            continue
        add(envelope.created_ms, envelope.host, envelope.client, envelope.sequence)


def _utc(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def format_report(result: dict) -> str:
    lines = []
    for topic in result["topics"]:
        lines.append(f"topic {topic['topic']} at {result['zookeeper']}, windows of {topic['window_ms']} ms, "
                     f"audit events from {', '.join(result['audit_sources'])} ({result['audit_topic']})")
        rows = [["window (UTC)", "produced", "received", "duplicates", "status"]]
        for window in topic["windows"]:
            status = window["status"]
            if status not in ("ok", OPEN):
                status = f"{status.upper()} {window['produced'] - window['received']:+d}"
            rows.append([_utc(window["start_ms"]), window["produced"], window["received"], window["duplicates"],
                         status])
            if window["status"] not in ("ok", OPEN):
                for producer in window["producers"]:
                    if producer["produced"] != producer["received"]:
                        rows.append([f"  {producer['host']}/{producer['client']}", producer["produced"],
                                     producer["received"], producer["duplicates"], ""])
        widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        open_windows = len(topic["windows"]) - topic["complete_windows"]
        lines.append(f"{topic['complete_windows']} complete window(s), {topic['discrepancies']} with a discrepancy; "
                     f"{open_windows} still open; {topic['unstamped']} message(s) without an envelope (not audited), "
                     f"{topic['malformed']} with a damaged one; {topic['events']} audit event(s)")
        lines.append("")
    lines += [f"note: {note}" for note in result["notes"]]
    lines.append("OK: no discrepancy" if not result["problems"] else f"DISCREPANCIES: {result['problems']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        durations = _check(args)
    except ValueError as exc:
        return fail(PROG, exc, EXIT_USAGE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # connection errors are reported below
    try:
        result = audit(args.zookeeper, args.topic, durations["window_ms"], sources=args.source_zookeeper,
                       audit_topic=args.audit_topic, grace_ms=durations["grace_ms"], since_ms=durations["since_ms"],
                       zk_timeout_ms=args.zk_timeout_ms, broker_timeout_ms=args.broker_timeout_ms,
                       allow_missing_topics=args.allow_missing_topics)
    except (UnknownTopicError, AuditWindowError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    except ZooKeeperUnavailable as exc:
        return fail(PROG, f"ZooKeeper unreachable: {exc}", EXIT_UNREACHABLE)
    except ZK_ERRORS as exc:
        return fail(PROG, f"lost ZooKeeper while reading: {exc!r}", EXIT_UNREACHABLE)
    try:
        print(json.dumps(result, indent=2) if args.json else format_report(result), flush=True)
    except BrokenPipeError:
        pass
    return EXIT_DISCREPANCY if result["problems"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
