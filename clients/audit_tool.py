"""``mpbroker-audit``: does every message the producers sent arrive? Per window,
produced (the producers' audit events) versus received (the topic's messages, by the
creation time in their envelopes).

    mpbroker-audit --zookeeper ZK --topic T [--topic T2 ...] [--window 1m]
        [--source-zookeeper ZK_A ...] [--audit-topic _audit] [--grace DURATION]
        [--since DURATION] [--json] [--zk-timeout-ms N] [--broker-timeout-ms N]

Reads, once, every partition of each topic at ``--zookeeper`` (up to the log ends at
the start of the read) and opens each message's audit envelope; reads the audit
topic's events -- at the same cluster, or, with ``--source-zookeeper`` (repeatable),
at the source clusters a mirror copies from: the producers wrote their events there,
and reading them at the source makes the count independent of the mirror being
audited (the mirror may or may not copy the audit topic; its copy is not read).
Then reports each window of ``--window`` (a multiple of the producers'
``audit.window.ms``; windows are aligned on the epoch, times shown in UTC), judging
only complete windows: ended at least ``--grace`` ago (default: one window).

A window is flagged when, for some producer, the distinct messages received differ
from the count it published (``clients.audit_ledger``); duplicates (redelivery by an
at-least-once mirror) are shown but are not a discrepancy. Messages without an
envelope are counted as not audited. ``--since 2h`` reports only the windows of the
last two hours (older messages may be gone with retention).

Exit codes: 0 every complete window matches; 1 a discrepancy (or a damaged envelope,
or events whose window does not fit ``--window``); 2 bad arguments; 3 no ZooKeeper
answered.
"""

import argparse
import datetime
import json
import logging
import sys
import time

from clients.audit_events import AuditEventError, decode_event, parse_duration_ms
from clients.audit_ledger import OPEN, AuditLedger
from clients.cluster_reader import BROKER_TIMEOUT_MS, ZK_TIMEOUT_MS, ClusterReader
from clients.envelope import MAGIC, EnvelopeError, open_envelope
from mpbroker.errors import InvalidTopicError
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ZK_ERRORS, ZooKeeperUnavailable
from mpbroker.segments.naming import check_topic

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
    parser.add_argument("--zk-timeout-ms", type=int, default=ZK_TIMEOUT_MS)
    parser.add_argument("--broker-timeout-ms", type=int, default=BROKER_TIMEOUT_MS)
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


def audit(zookeeper: str, topics: list, window_ms: int, *, sources=(), audit_topic: str = DEFAULT_AUDIT_TOPIC,
          grace_ms: int | None = None, since_ms: int | None = None, zk_timeout_ms: int = ZK_TIMEOUT_MS,
          broker_timeout_ms: int = BROKER_TIMEOUT_MS, now_ms: int | None = None) -> dict:
    """The audit as a dict (what ``--json`` prints); ZooKeeperUnavailable if a cluster
    does not answer."""
    grace_ms = window_ms if grace_ms is None else grace_ms
    ledgers = {topic: AuditLedger(topic, window_ms) for topic in dict.fromkeys(topics)}
    notes = []
    bad_events = 0
    with ClusterReader(zookeeper, zk_timeout_ms=zk_timeout_ms, broker_timeout_ms=broker_timeout_ms) as reader:
        for topic, ledger in ledgers.items():
            for payloads in reader.read_topic(topic):
                _count_received(ledger, payloads)
        notes += reader.notes
    for event_cluster in (list(sources) or [zookeeper]):
        with ClusterReader(event_cluster, zk_timeout_ms=zk_timeout_ms,
                           broker_timeout_ms=broker_timeout_ms) as reader:
            for payloads in reader.read_topic(audit_topic):
                for payload in payloads:
                    try:
                        event = decode_event(payload)
                    except AuditEventError:
                        bad_events += 1
                        continue
                    for ledger in ledgers.values():
                        ledger.add_event(event)
            notes += reader.notes
    if bad_events:
        notes.append(f"{bad_events} message(s) of {audit_topic} are not audit events (ignored)")
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
        if not ledger.events and (ledger.unstamped or any(w.received for w in windows)):
            notes.append(f"{topic}: no audit event counts this topic at {', '.join(list(sources) or [zookeeper])} "
                         f"({audit_topic}): are its producers audited (audit.envelope=true), and are "
                         f"--audit-topic and --source-zookeeper right?")
        for event in ledger.misaligned_events[:5]:
            notes.append(f"{topic}: producer {event.host}/{event.client} counts in windows of {event.window_ms} ms, "
                         f"which do not fit windows of {window_ms} ms: use a multiple of it")
    return {"zookeeper": zookeeper, "audit_sources": list(sources) or [zookeeper], "audit_topic": audit_topic,
            "now_ms": now_ms, "grace_ms": grace_ms, "topics": results, "notes": notes,
            "problems": sum(r["problems"] for r in results)}


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
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=f"{PROG}: %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # connection errors are reported below
    try:
        result = audit(args.zookeeper, args.topic, durations["window_ms"], sources=args.source_zookeeper,
                       audit_topic=args.audit_topic, grace_ms=durations["grace_ms"], since_ms=durations["since_ms"],
                       zk_timeout_ms=args.zk_timeout_ms, broker_timeout_ms=args.broker_timeout_ms)
    except ZooKeeperUnavailable as exc:
        print(f"{PROG}: ZooKeeper unreachable: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except ZK_ERRORS as exc:
        print(f"{PROG}: lost ZooKeeper while reading: {exc!r}", file=sys.stderr)
        return EXIT_UNREACHABLE
    try:
        print(json.dumps(result, indent=2) if args.json else format_report(result), flush=True)
    except BrokenPipeError:
        pass
    return EXIT_DISCREPANCY if result["problems"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
