"""What ``checker.check`` returns: the ``Report`` of a fault run's history, per partition
(``PartitionReport``) and in total, with the verdict (``failures()``, ``ok``), the table
a run prints (``table()``) and the first examples of each problem (``details()``).

Apart from the checks so that what a finding is (its kind's name, what is counted, how
it prints) reads in one place. The kinds' names are the keys of ``failures()`` and
``details()``, which the runner's summary (``bench/results/faults.json``) carries.
"""

from collections import Counter
from dataclasses import dataclass, field

from .history_records import FAILED, OK, PENDING

EXAMPLES = 5  # examples kept per kind of problem for details()

LOST = "lost"
DIVERGENT_READS = "divergent reads"
DIVERGENT_REPLICAS = "divergent replicas"
DUPLICATED = "unexplained duplicates"
ORDER = "order"
ABORTED = "aborted reads"
MISSING_FINAL = "missing final read"
FAILURE_KINDS = (LOST, DIVERGENT_READS, DIVERGENT_REPLICAS, DUPLICATED, ORDER, ABORTED, MISSING_FINAL)


@dataclass
class PartitionReport:
    topic: str
    partition: int
    attempts: int = 0
    reads: int = 0
    final_messages: int | None = None  # None: no final read
    acknowledged: Counter = field(default_factory=Counter)  # durability -> payloads acknowledged
    lost: Counter = field(default_factory=Counter)  # durability -> acknowledged payloads missing
    divergent_reads: int = 0  # (partition, offset) pairs observed two ways
    divergent_replicas: int = 0  # pairs of replica logs differing below the HW, and short logs
    duplicated_explained: int = 0  # extra copies in the final read, explained by retries
    duplicated_unexplained: int = 0
    order_violations: int = 0
    aborted_reads: int = 0  # distinct payloads read that no attempt may have appended

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def add(self, other: "PartitionReport") -> None:
        for name in ("attempts", "reads", "divergent_reads", "divergent_replicas", "duplicated_explained",
                     "duplicated_unexplained", "order_violations", "aborted_reads"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.final_messages is not None:
            self.final_messages = (self.final_messages or 0) + other.final_messages
        self.acknowledged.update(other.acknowledged)
        self.lost.update(other.lost)


@dataclass
class Report:
    seed: object
    partitions: dict  # (topic, partition) -> PartitionReport
    total: PartitionReport
    outcomes: Counter  # attempt outcome -> attempts (pending ones counted as such)
    acknowledged_attempts: Counter  # durability -> attempts acknowledged
    faults: Counter  # fault kind -> faults applied
    missing_final_reads: list  # (topic, partition) produced to or read, with no final read
    examples: dict  # failure kind (or "lost d0"/"lost d1"/"explained duplicates") -> [str]
    modern: object = None  # modern_checker.ModernReport, None without modern clients

    # --- the verdict ----------------------------------------------------------------

    @property
    def lost(self) -> Counter:
        return self.total.lost

    @property
    def acknowledged(self) -> Counter:
        return self.total.acknowledged

    @property
    def divergent(self) -> int:
        return self.total.divergent_reads + self.total.divergent_replicas

    @property
    def duplicated(self) -> tuple:
        """(explained, unexplained) extra copies in the final reads."""
        return self.total.duplicated_explained, self.total.duplicated_unexplained

    @property
    def order_violations(self) -> int:
        return self.total.order_violations

    @property
    def aborted_reads(self) -> int:
        return self.total.aborted_reads

    def failures(self) -> dict:
        """Failure kind -> count, for the kinds that are non-zero."""
        counts = {LOST: self.total.lost[2], DIVERGENT_READS: self.total.divergent_reads,
                  DIVERGENT_REPLICAS: self.total.divergent_replicas, DUPLICATED: self.total.duplicated_unexplained,
                  ORDER: self.total.order_violations, ABORTED: self.total.aborted_reads,
                  MISSING_FINAL: len(self.missing_final_reads)}
        if self.modern is not None:
            counts.update(self.modern.failures())
        return {kind: count for kind, count in counts.items() if count}

    @property
    def ok(self) -> bool:
        return not self.failures()

    # --- what a run prints ------------------------------------------------------------

    def table(self) -> str:
        verdict = "OK" if self.ok else "FAILED: " + ", ".join(f"{kind} {n}" for kind, n in self.failures().items())
        total = self.total
        outcomes = ", ".join(f"{name} {self.outcomes[name]}" for name in (OK, FAILED, "indeterminate", PENDING)
                             if self.outcomes[name])
        lines = [f"history check (seed {self.seed}): {verdict}",
                 f"operations: {sum(self.outcomes.values())} produce attempts ({outcomes or 'none'}), "
                 f"{total.reads} messages read, {total.final_messages or 0} in the final reads of "
                 f"{sum(p.final_messages is not None for p in self.partitions.values())} partitions",
                 "acknowledged attempts: " + _by_durability(self.acknowledged_attempts)]
        header = ("partition", "attempts", "reads", "final", "acked d0/d1/d2", "lost d0/d1/d2", "divergent r/rep",
                  "dup expl/unexpl", "order", "aborted")
        rows = [header]
        for report in [*sorted(self.partitions.values(), key=lambda p: (p.topic, p.partition)), total]:
            rows.append((report.name if report is not total else "total", str(report.attempts), str(report.reads),
                         "-" if report.final_messages is None else str(report.final_messages),
                         "/".join(str(report.acknowledged[d]) for d in (0, 1, 2)),
                         "/".join(str(report.lost[d]) for d in (0, 1, 2)),
                         f"{report.divergent_reads}/{report.divergent_replicas}",
                         f"{report.duplicated_explained}/{report.duplicated_unexplained}",
                         str(report.order_violations), str(report.aborted_reads)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(cell.rjust(width) if i else cell.ljust(width)
                                   for i, (cell, width) in enumerate(zip(row, widths))))
        lines.append("(acked and lost count payloads; lost d0/d1 are the price of the weaker acknowledgements, not "
                     "failures; divergent: offsets read two ways / replica pairs differing below the HW or short logs; "
                     "dup: extra copies in the final read)")
        if self.modern is not None:
            lines.append(self.modern.table())
        lines.append("faults: " + (", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items())) or "none"))
        return "\n".join(lines)

    def details(self) -> str:
        """The first examples of each kind of problem (and of the counted trade-offs)."""
        parts = []
        modern = self.modern.examples if self.modern is not None else {}
        for kind, examples in [*self.examples.items(), *modern.items()]:
            if examples:
                parts.append(f"{kind}:")
                parts.extend(f"  {example}" for example in examples)
        return "\n".join(parts) if parts else "no problems"

    def __str__(self) -> str:
        return self.table() if self.ok else f"{self.table()}\n{self.details()}"


def _by_durability(counter: Counter) -> str:
    return ", ".join(f"d{d} {counter[d]}" for d in (0, 1, 2))


class Examples(dict):
    """Kind of problem -> the first ``EXAMPLES`` descriptions of it. ``text`` may be a
    callable, formatted only while fewer are kept (a broken run finds many)."""

    def note(self, kind: str, text) -> None:
        found = self.setdefault(kind, [])
        if len(found) < EXAMPLES:
            found.append(text() if callable(text) else text)
