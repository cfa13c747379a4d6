"""The checker of the modern clients' part of a fault run's history: the record-batch
topic that confluent-kafka and kafka-python producers write and a consumer group reads
and commits (``modern_workload``). ``check_modern(history)`` returns a ``ModernReport``
that ``checker.check`` folds into its ``Report`` (its failures, its table's rows, its
examples); ``None`` for a history without modern clients (an old saved one).

Offsets are the modern protocol's, as the broker names them: increasing, one per
record, not dense (a batch's base offset is where it starts in the log). The *final read* is
every record of a partition from its log start to the high watermark after the heal.

A send's outcome is its delivery report, after all the retries the client made by
itself (librdkafka and kafka-python resend a batch that timed out or met NOT_LEADER,
unseen by the history): ``ok`` names one offset; a send reported failed may still
have been stored by an earlier try, so every error is indeterminate unless the
workload judged it one that certainly appended nothing.

- **Lost**: an acknowledged value (``ok``) missing from its partition's final read. A
  failure for producers with ``acks=all`` (every one of them writes a topic with
  ``min.insync.replicas`` 2); counted, not a failure, with ``acks=1``.
- **Duplicates**: a value more than once in the final read. From an idempotent
  producer, told apart by the producer id and epoch the leader stored with each copy
  (``ModernFinalRead.batches``): the same in every copy, or not known, is *idempotent
  duplicates*, a failure: the broker's defect (it must answer a retried batch with its
  first offsets and not store it again). Copies under different epochs or producer
  ids are counted (*resent after an epoch bump*), not a failure: the client sent a
  possibly stored message again as a new one after bumping its epoch, which no broker
  can recognise. librdkafka does that (its issue 4953, open): one partition's request
  refused with NOT_LEADER_FOR_PARTITION and the next one, pipelined behind it, refused
  with OUT_OF_ORDER_SEQUENCE_NUMBER (as Kafka answers it too) make it bump the epoch
  for every partition and re-sequence what was in flight on the others, stored or not
  (seen in seeds 1095513148 and 393353683, its eos log lines in their histories'
  ``client_logs``). From a non-idempotent producer counted, explained by the client's
  own retries (a batch stored whose answer was lost, sent again).
- **Order**: each acknowledged value at the offset its acknowledgement named (a copy
  of it there, for a duplicated one), for every producer: a failure. And for each
  producer and partition, its acknowledged values in the order they were sent
  (``Send.id``, one thread sends them) at strictly increasing offsets in the final
  read: a failure for an idempotent producer (the client keeps order across retries
  and leader changes, the broker's sequence check refuses a gap); counted, not a
  failure, without idempotence, where librdkafka says retries may reorder even with one
  request in flight (a request that timed out on the old leader is sent again after
  newer ones went to the new leader; seen in seed 577090037's run). Lost values are
  left to *lost*.
- **Aborted reads**: a value in the final read or read by the group that no send may
  have appended (none sent it, or its only send certainly appended nothing).
- **Divergent group reads**: a record the group read at an offset where the final read
  holds another value (or nothing, below its end): a consumer sees only records below
  the high watermark, which never move.
- **Commits ahead**: a commit of partition offset ``o`` when the group had read no
  record at ``o - 1`` or above in that partition before the commit began (a commit
  names the next record to read, so at most one past the highest read); the same for
  the group's committed offset after the run, against everything it read.
- **Commits lost**: the group's committed offset of a partition after the run below
  the highest offset a commit of it acknowledged (or none left at all).
- **Skipped by the group**: a record of the final read below the group's committed
  offset after the run that no member read: a commit covers only what was read.

Shown, not failures: per producer (client, acks, idempotence) the values
acknowledged, lost and duplicated; the group's reads and commits.
"""

from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .history import History
from .history_records import FAILED, OK

EXAMPLES = 5

MODERN_LOST = "modern acks=all lost"
IDEMPOTENT_DUPLICATES = "idempotent duplicates"  # copies under one producer epoch (or not known)
RESENT_AFTER_BUMP = "resent after an epoch bump (counted, not a failure)"  # copies under different epochs or ids
MODERN_ORDER = "modern order"
MODERN_ABORTED = "modern aborted reads"
GROUP_DIVERGENT = "divergent group reads"
COMMIT_AHEAD = "commits ahead of reads"
COMMIT_LOST = "commits lost"
GROUP_SKIPPED = "skipped by the group"
MODERN_MISSING_FINAL = "modern missing final read"
MODERN_FAILURE_KINDS = (MODERN_LOST, IDEMPOTENT_DUPLICATES, MODERN_ORDER, MODERN_ABORTED, GROUP_DIVERGENT,
                        COMMIT_AHEAD, COMMIT_LOST, GROUP_SKIPPED, MODERN_MISSING_FINAL)


@dataclass
class ProducerRow:
    """One producer's counts (values, not sends)."""
    client: str
    acks: str
    idempotent: bool
    sent: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicates: int = 0  # extra copies in the final reads
    resent: int = 0  # of those, an idempotent producer's across an epoch bump
    order_violations: int = 0

    @property
    def label(self) -> str:
        return f"{self.client} acks={self.acks}{' idempotent' if self.idempotent else ''}"


@dataclass
class ModernReport:
    producers: dict = field(default_factory=dict)  # producer name -> ProducerRow
    counts: Counter = field(default_factory=Counter)  # failure kind -> count
    outcomes: Counter = field(default_factory=Counter)  # send outcome -> sends
    group_reads: int = 0
    commits: int = 0
    commits_ok: int = 0
    final_messages: int = 0
    group_final: dict = field(default_factory=dict)  # partition -> committed offset after the run
    examples: dict = field(default_factory=dict)

    def failures(self) -> dict:
        return {kind: self.counts[kind] for kind in MODERN_FAILURE_KINDS if self.counts[kind]}

    def by_label(self) -> dict:
        """Client/acks label -> {"acknowledged", "lost", "duplicates", "resent"} (resent: the
        duplicates across an idempotent producer's epoch bump), summed over producers."""
        rows = {}
        for row in self.producers.values():
            found = rows.setdefault(row.label, Counter())
            found.update({"acknowledged": row.acknowledged, "lost": row.lost, "duplicates": row.duplicates,
                          "resent": row.resent})
        return {label: dict(counts) for label, counts in sorted(rows.items())}

    def table(self) -> str:
        outcomes = ", ".join(f"{name} {n}" for name, n in sorted(self.outcomes.items()))
        lines = [f"modern clients: {sum(self.outcomes.values())} sends ({outcomes or 'none'}), "
                 f"{self.final_messages} records in the final reads, group read {self.group_reads}, "
                 f"commits {self.commits_ok}/{self.commits} ok, committed after the run "
                 + (", ".join(f"p{p} {o}" for p, o in sorted(self.group_final.items())) or "none")]
        header = ("producer", "client / acks", "sent", "acked", "lost", "dup", "resent", "order")
        rows = [header] + [(name, row.label, str(row.sent), str(row.acknowledged), str(row.lost),
                            str(row.duplicates), str(row.resent), str(row.order_violations))
                           for name, row in sorted(self.producers.items())]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(cell.rjust(width) if i > 1 else cell.ljust(width)
                                   for i, (cell, width) in enumerate(zip(row, widths))))
        lines.append("(lost with acks=1, duplicates and order without idempotence, and an idempotent producer's copies "
                     "resent after an epoch bump are counted, not failures)")
        return "\n".join(lines)

    def note(self, kind: str, text) -> None:
        found = self.examples.setdefault(kind, [])
        if len(found) < EXAMPLES:
            found.append(text() if callable(text) else text)

    def fail(self, kind: str, text) -> None:
        self.counts[kind] += 1
        self.note(kind, text)


def check_modern(history: History) -> ModernReport | None:
    if not history.sends and not history.group_reads and not history.commits and not history.modern_finals:
        return None
    report = ModernReport(group_reads=len(history.group_reads), commits=len(history.commits),
                          commits_ok=sum(commit.ok for commit in history.commits))
    finals = {key: _index_final(final) for key, final in history.modern_finals.items()}
    report.final_messages = sum(len(final.entries) for final in history.modern_finals.values())
    appendable = defaultdict(set)  # (topic, partition) -> values some send may have appended
    by_producer = defaultdict(list)  # (producer, topic, partition) -> its acknowledged sends
    for send in history.sends.values():
        key = (send.topic, send.partition)
        report.outcomes[send.outcome] += 1
        row = report.producers.setdefault(send.producer, ProducerRow(send.client, send.acks, send.idempotent))
        row.sent += 1
        if send.outcome != FAILED:
            appendable[key].add(send.value)
        if key not in finals:
            report.fail(MODERN_MISSING_FINAL, f"{send.topic}-{send.partition}: sent to, but no final read")
            finals[key] = _Final()
        if send.outcome == OK:
            row.acknowledged += 1
            by_producer[(send.producer, *key)].append(send)
            _check_lost(send, finals[key], row, report)
    _check_duplicates(history, finals, report)
    for (producer, topic, partition), sends in by_producer.items():
        _check_order(producer, topic, partition, sends, finals[(topic, partition)], report)
    _check_aborted(history, finals, appendable, report)
    _check_group(history, finals, report)
    return report


class _Final:
    __slots__ = ("by_offset", "copies", "end")

    def __init__(self):
        self.by_offset = {}  # offset -> value
        self.copies = defaultdict(list)  # value -> offsets
        self.end = 0


def _index_final(final_read) -> _Final:
    final = _Final()
    for offset, value in final_read.entries:
        final.by_offset[offset] = value
        final.copies[value].append(offset)
        final.end = max(final.end, offset + 1)
    return final


def _check_lost(send, final: _Final, row: ProducerRow, report: ModernReport) -> None:
    if send.value in final.copies:
        return
    row.lost += 1
    where = f"{send.topic}-{send.partition}: {send.value!r} of {send.producer} ({row.label}) acknowledged at " \
            f"offset {send.offset} is not in the final read"
    if send.acks == "all":
        report.fail(MODERN_LOST, where)
    else:
        report.note("modern acks=1 lost (counted, not a failure)", where)


def _check_duplicates(history, finals: dict, report: ModernReport) -> None:
    senders = {}  # (topic, partition, value) -> the send
    for send in history.sends.values():
        senders.setdefault((send.topic, send.partition, send.value), send)
    for (topic, partition), final in finals.items():
        writers = _Writers(history.modern_finals.get((topic, partition)))
        for value, offsets in final.copies.items():
            if len(offsets) < 2:
                continue
            send = senders.get((topic, partition, value))
            if send is None:
                continue  # nobody sent it: an aborted read, counted there
            row = report.producers[send.producer]
            row.duplicates += len(offsets) - 1
            where = f"{topic}-{partition}: {value!r} of {send.producer} ({row.label}) at offsets {offsets}"
            if send.idempotent:
                stored = [writers.at(offset) for offset in offsets]
                described = ", ".join("unknown" if s is None else f"producer {s[0]} epoch {s[1]} sequence {s[2]}"
                                      for s in stored)
                bumped = None not in stored and len({s[:2] for s in stored}) > 1
                if bumped:
                    row.resent += len(offsets) - 1
                    report.note(RESENT_AFTER_BUMP, f"{where}, stored as {described}")
                else:
                    report.fail(IDEMPOTENT_DUPLICATES, f"{where}, stored as {described}")
                    report.counts[IDEMPOTENT_DUPLICATES] += len(offsets) - 2
            else:
                report.note("duplicates without idempotence (counted, not a failure)", where)


class _Writers:
    """Offset -> (producer id, epoch, sequence) of the record there, from the batches
    the final read recorded."""

    def __init__(self, final_read):
        self.batches = sorted(final_read.batches) if final_read is not None else []
        self.bases = [batch[0] for batch in self.batches]

    def at(self, offset: int):
        index = bisect_right(self.bases, offset) - 1
        if index < 0:
            return None
        base, records, producer_id, epoch, sequence = self.batches[index]
        return (producer_id, epoch, sequence + offset - base) if offset < base + records else None


def _check_order(producer, topic, partition, sends, final: _Final, report: ModernReport) -> None:
    row = report.producers[producer]
    previous, previous_value = -1, None
    reordered = MODERN_ORDER if row.idempotent else "reordered without idempotence (counted, not a failure)"
    for send in sorted(sends, key=lambda send: send.id):
        offsets = final.copies.get(send.value)
        if not offsets:
            continue  # lost: counted there
        if send.offset is None:  # acknowledged without an offset: its place is the first copy's
            report.note("modern acknowledged without an offset (counted, not a failure)",
                        f"{topic}-{partition}: {send.value!r} of {producer}, in the final read at {offsets}")
            position = offsets[0]
        elif send.offset not in offsets:
            row.order_violations += 1
            report.fail(MODERN_ORDER, f"{topic}-{partition}: {send.value!r} of {producer} acknowledged at offset "
                                      f"{send.offset}, in the final read at {offsets}")
            position = offsets[0]
        else:
            position = send.offset
        if position <= previous:
            row.order_violations += 1
            (report.fail if row.idempotent else report.note)(reordered, f"{topic}-{partition}: {send.value!r} of {producer} at offset {position}, "
                                      f"not after {previous_value!r} (offset {previous}) sent before it")
        if position > previous:
            previous, previous_value = position, send.value


def _check_aborted(history, finals: dict, appendable: dict, report: ModernReport) -> None:
    found = set()
    for (topic, partition), final in finals.items():
        for value, offsets in final.copies.items():
            if value not in appendable[(topic, partition)] and (topic, partition, value) not in found:
                found.add((topic, partition, value))
                report.fail(MODERN_ABORTED, f"{topic}-{partition}: {value!r} in the final read at {offsets}: no send "
                                            f"may have appended it")
    for read in history.group_reads:
        if read.value not in appendable[(read.topic, read.partition)] \
                and (read.topic, read.partition, read.value) not in found:
            found.add((read.topic, read.partition, read.value))
            report.fail(MODERN_ABORTED, f"{read.topic}-{read.partition}: {read.value!r} read by {read.member} at "
                                        f"offset {read.offset}: no send may have appended it")


def _check_group(history, finals: dict, report: ModernReport) -> None:
    read_offsets = defaultdict(set)  # (topic, partition) -> offsets the group read
    read_times = defaultdict(list)  # (topic, partition) -> read times, in order
    highest_read = defaultdict(list)  # (topic, partition) -> the highest offset read up to each of those times
    divergent = set()
    for read in sorted(history.group_reads, key=lambda read: read.time):
        key = (read.topic, read.partition)
        read_offsets[key].add(read.offset)
        read_times[key].append(read.time)
        highest_read[key].append(max(read.offset, highest_read[key][-1] if highest_read[key] else -1))
        final = finals.get(key)
        if final is None or (read.topic, read.partition, read.offset) in divergent:
            continue
        expected = final.by_offset.get(read.offset)
        if expected != read.value:
            divergent.add((read.topic, read.partition, read.offset))
            report.fail(GROUP_DIVERGENT, f"{read.topic}-{read.partition}: {read.member} read {read.value!r} at "
                                         f"offset {read.offset}, the final read has "
                                         f"{'nothing' if expected is None else repr(expected)} there")
    highest_acked = {}  # (topic, partition) -> (offset, commit)
    for commit in history.commits:
        for partition, offset in commit.offsets.items():
            key = (commit.topic, partition)
            before = bisect_right(read_times[key], commit.start)
            read_before = highest_read[key][before - 1] if before else -1
            if offset > read_before + 1:
                report.fail(COMMIT_AHEAD, f"{commit.topic}-{partition}: {commit.member} committed {offset} "
                                          f"({'ok' if commit.ok else commit.error}) when the group had read up to "
                                          f"offset {read_before}")
            if commit.ok and offset > highest_acked.get(key, (-1, None))[0]:
                highest_acked[key] = (offset, commit)
    for key, offset in history.group_final.items():
        report.group_final[key[1]] = offset
        read_max = max(read_offsets[key], default=-1)
        if offset > read_max + 1:
            report.fail(COMMIT_AHEAD, f"{key[0]}-{key[1]}: committed {offset} after the run, the group read up to "
                                      f"offset {read_max}")
    for key, (offset, commit) in highest_acked.items():
        after = history.group_final.get(key)
        if after is None or after < offset:
            report.fail(COMMIT_LOST, f"{key[0]}-{key[1]}: {commit.member}'s commit of {offset} was acknowledged, "
                                     f"committed after the run: {after}")
    for key, offset in history.group_final.items():
        final = finals.get(key)
        if final is None:
            continue
        skipped = sorted(o for o in final.by_offset if o < offset and o not in read_offsets[key])
        if skipped:
            report.counts[GROUP_SKIPPED] += len(skipped)
            report.note(GROUP_SKIPPED, f"{key[0]}-{key[1]}: {len(skipped)} records below the committed {offset} no "
                                       f"member read, e.g. offsets {skipped[:5]}")
