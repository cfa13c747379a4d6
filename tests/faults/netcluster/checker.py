"""The checker of a fault run's history (``history.History``): ``check(history)`` reads
the whole history once and returns a ``Report`` (``checker_report``: per partition and
in total) whose ``table()`` is what a run prints and whose ``details()`` names the first
examples of each problem. Pure Python over dicts and sets, linear in the size of the history (a
million payloads take seconds), so it can run after every schedule and again offline
on a saved history.

What it checks, and why each is a fact the replication design promises (ARCHITECTURE.md,
"Replication": a follower copies its leader's bytes, so every replica is byte-identical
to the leader below the high watermark, consumers see only bytes below it, and a
durability-2 acknowledgement waits until the high watermark covers the set). The
*final read* is the final leader's whole log after the heal; a *read* is any message a
consumer got, at any time, from any broker.

- **Lost**: a payload acknowledged with durability 2 that the final read of its
  partition does not hold. A failure. Payloads acknowledged with durability 0 or 1 and
  missing are counted too (the price of the weaker acknowledgement, the trade-off the
  table shows) but are not failures.
- **Divergent reads**: a partition and byte offset observed two ways: two reads, or a
  read and the final read, starting a message there with different payloads or
  different next offsets. Also a read starting a message where no message of the final
  read starts, or beyond the final read's end: what a consumer saw was below a high
  watermark, so the final log must hold that same message at that same offset. Counted
  once per (partition, offset).
- **Divergent replicas**: two replica logs of a partition whose bytes differ below the
  smaller of the high watermarks recorded with them (bytes above it may differ: that is
  the uncommitted tail a follower truncates), counted per pair; and a replica log
  shorter than its high watermark (it lacks committed bytes), counted per log.
- **Duplicated**: a payload more than once in the final read. Each extra copy is
  *explained* when the payload belongs to one retry chain (attempts linked by
  ``retry_of``) with at least as many attempts that may have appended it (not
  ``failed``) as there are copies; otherwise (no retry, more copies than attempts, the
  payload sent by unrelated attempts, or by none) *unexplained*, a failure.
- **Order**: for each producer and partition, the payloads of its acknowledged
  durability-2 attempts, taken in acknowledgement order (by end time) and in each
  attempt in the order sent, must appear in the final read at increasing offsets, each
  within the byte range ``[offset, next_offset)`` its acknowledgement named (a committed
  set never moves: offsets are byte positions and committed bytes are identical on
  every replica). This assumes what the workload does: one producer has at most one
  request in flight per partition, so acknowledgement order is send order. And the
  final read's offsets must strictly increase. Counted per payload (or per final-read
  entry) out of place. Payloads lost are left to *lost*.
- **Aborted reads**: a payload read (by a consumer or in the final read) that no attempt
  of its partition may have appended: every attempt that sent it ``failed`` (refused
  before any append), or none sent it at all (bytes nobody wrote). Counted once per
  (partition, payload).

The modern clients' record-batch topic (confluent-kafka and kafka-python producers, a
consumer group that commits) is checked by ``modern_checker``; its failures count here
and its rows follow the table.

Not failures but shown: operations, acknowledged payloads by durability, the faults
applied by kind. ``Report.ok`` is False if anything above that is a failure is non-zero,
or if a partition that was produced to or read has no final read (nothing could be
checked against it).

Assumptions: uncompressed messages (a read's offset is where its message starts; inside
a compressed wrapper several messages would share an offset); payloads unique per
producer write; the final read taken once the final leader's high watermark has caught
up (after the heal, when every replica's log end equals it).
"""

from collections import Counter, defaultdict

from . import checker_report as kinds  # the failure kinds' names
from .checker_report import Examples, PartitionReport, Report
from .history import History
from .history_records import FAILED, OK
from .modern_checker import check_modern


class _Sent:
    """What the attempts of one partition sent, per payload (one int per payload in
    each dict: a million payloads stay small)."""

    __slots__ = ("first", "appendable", "acked", "conflicts", "d2_by_producer")

    def __init__(self):
        self.first = {}  # payload -> the first attempt that sent it
        self.appendable = {}  # payload -> attempts that sent it and may have appended it
        self.acked = {}  # payload -> the highest durability it was acknowledged with
        self.conflicts = set()  # payloads sent by attempts of different retry chains
        self.d2_by_producer = defaultdict(list)  # producer -> its acknowledged durability-2 attempts


def check(history: History) -> Report:
    examples = Examples()
    partitions = {}

    def partition(topic, number) -> PartitionReport:
        key = (topic, number)
        found = partitions.get(key)
        if found is None:
            found = partitions[key] = PartitionReport(topic, number)
        return found

    roots = _retry_roots(history.attempts)
    sent, outcomes, acknowledged_attempts = _index_attempts(history, roots, partition)

    finals = {}
    aborted = defaultdict(set)  # (topic, partition) -> payloads read that no attempt may have appended
    for key, final in history.final_reads.items():
        report = partition(*key)
        report.final_messages = len(final.entries)
        finals[key] = _check_final(final, sent.get(key) or _Sent(), report, aborted[key], examples)

    for key, report in partitions.items():
        if key in finals:
            _check_lost(key, sent.get(key), finals[key], report, examples)
            _check_order(key, sent.get(key), finals[key], report, examples)
    _check_reads(history.reads, sent, finals, partition, aborted, examples)
    _check_replicas(history.replica_logs, partition, examples)

    missing = sorted(key for key in partitions if key not in finals)
    for topic, number in missing:
        examples.note(kinds.MISSING_FINAL, f"{topic}-{number}: produced to or read, but no final read recorded")

    total = PartitionReport("", -1)
    for report in partitions.values():
        total.add(report)
    return Report(history.seed, partitions, total, outcomes, acknowledged_attempts,
                  Counter(fault.kind for fault in history.faults), missing, dict(examples), check_modern(history))


def _retry_roots(attempts: dict) -> dict:
    """Attempt id -> the id of the first attempt of its retry chain."""
    roots = {}
    for attempt_id in sorted(attempts):
        chain = []
        current = attempt_id
        while current not in roots:
            chain.append(current)
            parent = attempts[current].retry_of if current in attempts else None
            if parent is None or parent in chain:
                roots[current] = current
                break
            current = parent
        root = roots[current]
        for member in chain:
            roots[member] = root
    return roots


def _index_attempts(history, roots, partition):
    sent = defaultdict(_Sent)
    outcomes = Counter()
    acknowledged_attempts = Counter()
    for attempt in history.attempts.values():
        key = (attempt.topic, attempt.partition)
        report = partition(*key)
        report.attempts += 1
        outcomes[attempt.outcome] += 1
        index = sent[key]
        appendable = attempt.outcome != FAILED
        acked = attempt.outcome == OK
        if acked:
            acknowledged_attempts[attempt.durability] += 1
            if attempt.durability == 2:
                index.d2_by_producer[attempt.producer].append(attempt)
        root = roots[attempt.id]
        for payload in attempt.payloads:
            first = index.first.setdefault(payload, attempt.id)
            if first != attempt.id and roots[first] != root:
                index.conflicts.add(payload)
            if appendable:
                index.appendable[payload] = index.appendable.get(payload, 0) + 1
            if acked and index.acked.get(payload, -1) < attempt.durability:
                index.acked[payload] = attempt.durability
    for key, index in sent.items():
        counted = Counter(index.acked.values())
        partition(*key).acknowledged.update({d: counted[d] for d in (0, 1, 2)})
    return sent, outcomes, acknowledged_attempts


class _Final:
    """The final read of one partition, indexed."""

    __slots__ = ("by_offset", "position", "copies", "start", "end", "broker")

    def __init__(self, broker):
        self.by_offset = {}  # offset -> (next_offset, payload)
        self.position = {}  # payload -> offset of its first copy
        self.copies = {}  # payload -> offsets of every copy, for payloads with more than one
        self.start = None
        self.end = None  # the next offset after the last message
        self.broker = broker


def _check_final(final_read, index: _Sent, report: PartitionReport, aborted: set, examples: Examples) -> _Final:
    """Index the final read; its offsets' order, duplicates, aborted reads."""
    name = report.name
    final = _Final(final_read.broker)
    previous = None
    for offset, next_offset, payload in final_read.entries:
        if final.start is None:
            final.start = offset
        if (previous is not None and offset <= previous) or next_offset <= offset:
            report.order_violations += 1
            examples.note(kinds.ORDER, lambda: f"{name}: final read entry at offset {offset} (next {next_offset}) "
                                               f"after offset {previous}: offsets must strictly increase")
        previous = offset if previous is None else max(previous, offset)
        final.by_offset.setdefault(offset, (next_offset, payload))
        final.end = next_offset if final.end is None else max(final.end, next_offset)
        first = final.position.setdefault(payload, offset)
        if first != offset:
            final.copies.setdefault(payload, [first]).append(offset)
        if payload not in aborted and not index.appendable.get(payload):
            aborted.add(payload)
            _note_aborted(name, payload, index, f"in the final read at offset {offset}", examples)
    report.aborted_reads += len(aborted)
    for payload, offsets in final.copies.items():
        extra = len(offsets) - 1
        chain_attempts = index.appendable.get(payload, 0)
        if payload not in index.conflicts and len(offsets) <= chain_attempts:
            report.duplicated_explained += extra
            examples.note("explained duplicates", lambda: f"{name}: {payload!r} at offsets {offsets}, sent by "
                                                          f"{chain_attempts} attempts of the retry chain of attempt "
                                                          f"{index.first[payload]}")
        else:
            report.duplicated_unexplained += extra
            examples.note(kinds.DUPLICATED, lambda: f"{name}: {payload!r} at offsets {offsets}: "
                                                    + _why_unexplained(payload, index, len(offsets)))
    return final


def _why_unexplained(payload, index: _Sent, copies: int) -> str:
    if payload not in index.first:
        return "no attempt sent it"
    if payload in index.conflicts:
        return f"sent by attempts of different retry chains (first: attempt {index.first[payload]})"
    return (f"{copies} copies, but only {index.appendable.get(payload, 0)} attempt(s) of its chain "
            f"(attempt {index.first[payload]}) may have appended it")


def _note_aborted(name, payload, index: _Sent, where: str, examples: Examples) -> None:
    first = index.first.get(payload)
    why = "no attempt of this partition sent it" if first is None else \
        f"every attempt that sent it failed (first: attempt {first})"
    examples.note(kinds.ABORTED, lambda: f"{name}: {payload!r} {where}: {why}")


def _check_lost(key, index: _Sent | None, final: _Final, report: PartitionReport, examples: Examples) -> None:
    if index is None:
        return
    present = final.position
    for payload, durability in index.acked.items():
        if payload not in present:
            report.lost[durability] += 1
            kind = kinds.LOST if durability == 2 else f"lost d{durability} (counted, not a failure)"
            examples.note(kind, lambda: f"{report.name}: {payload!r} acknowledged with durability {durability} "
                                        f"(attempt {index.first[payload]}) is not in the final read")


def _check_order(key, index: _Sent | None, final: _Final, report: PartitionReport, examples: Examples) -> None:
    if index is None:
        return
    name = report.name
    for producer, attempts in index.d2_by_producer.items():
        attempts.sort(key=lambda attempt: (attempt.end if attempt.end is not None else attempt.start, attempt.id))
        previous = -1
        previous_payload = None
        for attempt in attempts:
            low, high = attempt.offset, attempt.next_offset
            for payload in attempt.payloads:
                position = final.position.get(payload)
                if position is None:
                    continue  # lost: counted there
                copies = final.copies.get(payload)
                if copies is not None and low is not None:
                    position = next((offset for offset in copies if low <= offset < high), position)
                misplaced = low is not None and high is not None and not low <= position < high
                backwards = position <= previous
                if misplaced or backwards:
                    report.order_violations += 1
                    if misplaced:
                        examples.note(kinds.ORDER, lambda: f"{name}: producer {producer}'s {payload!r} (attempt "
                                                           f"{attempt.id}) acknowledged at [{low}, {high}) is at "
                                                           f"offset {position} in the final read")
                    else:
                        examples.note(kinds.ORDER, lambda: f"{name}: producer {producer}'s {payload!r} (attempt "
                                                           f"{attempt.id}) at offset {position}, before "
                                                           f"{previous_payload!r} (at {previous}) acknowledged earlier")
                if position > previous:
                    previous, previous_payload = position, payload


def _check_reads(reads, sent: dict, finals: dict, partition, aborted: dict, examples: Examples) -> None:
    """Reads against the final read and against each other; aborted reads (``aborted``:
    per partition, the payloads counted already, by the final read)."""
    seen = defaultdict(dict)  # (topic, partition) -> offset -> (next_offset, payload, read) not in the final read
    divergent = defaultdict(set)  # (topic, partition) -> offsets
    empty = _Sent()
    for read in reads:
        key = (read.topic, read.partition)
        report = partition(*key)
        report.reads += 1
        index = sent.get(key, empty)
        offset, next_offset, payload = read.offset, read.next_offset, read.payload
        if not index.appendable.get(payload):
            found = aborted[key]
            if payload not in found:
                found.add(payload)
                report.aborted_reads += 1
                _note_aborted(report.name, payload, index, f"read by {read.reader} at offset {offset} from broker "
                                                           f"{read.broker}", examples)
        final = finals.get(key)
        problem = None
        if final is not None and final.start is not None and offset >= final.start:
            expected = final.by_offset.get(offset)
            if expected is not None:
                if expected != (next_offset, payload):
                    problem = (f"the final read (broker {final.broker}) has {expected[1]!r} with next offset "
                               f"{expected[0]}")
            elif offset < final.end:
                problem = f"no message of the final read (broker {final.broker}) starts there"
            else:
                problem = f"the final read (broker {final.broker}) ends at {final.end}"
        elif final is not None and final.start is None:
            problem = f"the final read (broker {final.broker}) is empty"
        if problem is None and (final is None or offset not in final.by_offset):
            other = seen[key].setdefault(offset, (next_offset, payload, read))
            if other[:2] != (next_offset, payload):
                problem = (f"{other[2].reader} read {other[1]!r} with next offset {other[0]} from broker "
                           f"{other[2].broker}")
        if problem is not None and offset not in divergent[key]:
            divergent[key].add(offset)
            report.divergent_reads += 1
            examples.note(kinds.DIVERGENT_READS, lambda: f"{report.name} offset {offset}: {read.reader} read "
                                                         f"{payload!r} with next offset {next_offset} from broker "
                                                         f"{read.broker} ({read.role or 'role unknown'}); {problem}")


def _check_replicas(replica_logs, partition, examples: Examples) -> None:
    by_partition = defaultdict(list)
    for replica in replica_logs:
        by_partition[(replica.topic, replica.partition)].append(replica)
    for key, replicas in by_partition.items():
        report = partition(*key)
        for replica in replicas:
            end = replica.log_start + len(replica.data)
            if end < replica.high_watermark:
                report.divergent_replicas += 1
                examples.note(kinds.DIVERGENT_REPLICAS, lambda: f"{report.name}: broker {replica.broker}'s log ends "
                                                                f"at {end}, below the high watermark "
                                                                f"{replica.high_watermark} recorded with it (committed "
                                                                f"bytes missing)")
        for i, first in enumerate(replicas):
            for second in replicas[i + 1:]:
                difference = _first_difference(first, second)
                if difference is not None:
                    report.divergent_replicas += 1
                    examples.note(kinds.DIVERGENT_REPLICAS, lambda: (
                        f"{report.name}: brokers {first.broker} and {second.broker} differ at byte offset "
                        f"{difference}, below the high watermark "
                        f"{min(first.high_watermark, second.high_watermark)}"))


def _first_difference(first, second) -> int | None:
    """The first offset below both high watermarks where both logs hold a byte and the
    bytes differ; None if they agree there (a log too short is reported apart)."""
    low = max(first.log_start, second.log_start)
    high = min(first.high_watermark, second.high_watermark, first.log_start + len(first.data),
               second.log_start + len(second.data))
    if high <= low:
        return None
    a = memoryview(first.data)[low - first.log_start:high - first.log_start]
    b = memoryview(second.data)[low - second.log_start:high - second.log_start]
    if a == b:
        return None
    step = 1 << 16
    for start in range(0, len(a), step):
        if a[start:start + step] != b[start:start + step]:
            for position in range(start, min(start + step, len(a))):
                if a[position] != b[position]:
                    return low + position
    return None
