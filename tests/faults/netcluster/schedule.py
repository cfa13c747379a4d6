"""Fault schedules drawn from a seed: what the nemesis does, in which order, for how long.

Owns the choice and nothing else (no processes, no network): ``make_schedule(seed)``
is a pure function, so a seed printed by a run is enough to replay its schedule. Which
broker a step hits is named by role (the leader of a partition, one of its followers,
a broker of the cluster, ZooKeeper) and resolved when the step runs, since leaders move;
the step carries the index that picks among the candidates, so the replay resolves it
the same way when the cluster is in the same state.

A schedule is a few steps: each step applies its fault, holds it for ``hold_s`` (for a
kill or a power cut: how long the broker stays down), heals it (network routes and
links restored, processes resumed or restarted, a date stepped back) and waits
``gap_s`` before the next. With the chance ``OVERLAP`` a step carries a second fault
(``overlap``, a ``Step`` itself) that begins ``after_s`` into the first's hold, so the
two overlap, and holds for its own ``hold_s`` (it may outlast the first); the step
ends when both are healed, each at the end of its own hold. Pairs that cannot coexist
sensibly are not drawn or not resolved so (``second_kinds``, ``nemesis``):

- the second never hits the member the first hits (no broker killed twice, paused
  while killed, or isolated while power-cut): its role is resolved when the step
  begins, together with the first's, and another broker stands in if it names the
  first's (``pick`` chooses which);
- two ZooKeeper faults are not paired (one server to pause or kill);
- a second fault relative to a partition's leader (``split_leader_zookeeper``,
  ``one_way``) only follows a ZooKeeper fault, since the leader may be what the first
  hits (e.g. ZooKeeper paused, then a one-way drop between the leader and a follower).

A step without ``overlap`` (every schedule kept before overlaps existed) runs exactly
as before; the new fields' defaults mean "as before", so a kept schedule's JSON loads
unchanged. Holds straddle the ZooKeeper session (4 s in these tests):
a fault shorter than the session tests that nothing moves when nothing should, one
longer tests the failover.

The kinds (``KINDS``), after the issue's list:

- ``isolate``: a broker cut from every node and the clients (the leader, or a follower);
- ``cut_zookeeper``: a broker cut from ZooKeeper only (it still reaches its peers);
- ``split_leader_zookeeper``: {leader, ZooKeeper} | {followers}: the leader keeps its
  session and loses its ISR;
- ``one_way``: packets dropped in one direction only, between the leader and another
  node (a follower or ZooKeeper), either way round;
- ``link_down``: a broker's link taken down (a pulled cable);
- ``pause``: SIGSTOP/SIGCONT of a broker;
- ``kill``: SIGKILL of a broker, restarted after the hold (a hold of 0 restarts it at
  once, well within its old session: a bounce);
- ``power_cut``: SIGKILL of a broker, then every byte and directory entry no fsync
  covered dropped (``tests/faults/power_cut``; in ``random`` mode, half the time, some
  of them kept, maybe with a torn tail), then a restart after the hold;
- ``pause_zookeeper`` and ``kill_zookeeper``: the same for the ZooKeeper server;
- ``clock_step``: the date of a broker (the leader or a follower) jumps ``offset_s``
  (30 s to an hour, log-uniform, forward or back) for the hold, then steps back to the
  real date (libfaketime, ``clock``; ZooKeeper's date is not stepped, ``clock`` says
  why): timers must run on the monotonic clock, so nothing should move.
"""

import math
import random
from dataclasses import asdict, dataclass, replace

KINDS = ("isolate", "cut_zookeeper", "split_leader_zookeeper", "one_way", "link_down", "pause", "kill", "power_cut",
         "pause_zookeeper", "kill_zookeeper", "clock_step")
ZOOKEEPER_KINDS = ("pause_zookeeper", "kill_zookeeper")  # hit the ZooKeeper server
LEADER_KINDS = ("split_leader_zookeeper", "one_way")  # hit a partition's leader and its peers
DOWN_KINDS = ("kill", "power_cut", "kill_zookeeper")  # the hold is the time down
OVERLAP = 0.35  # chance that a step carries a second, overlapping fault
MIN_OVERLAPPED_HOLD_S = 1.0  # a shorter first fault (a bounce) gets no second one
CLOCK_STEP_S = (30.0, 3600.0)  # a clock step's size, log-uniform, forward or back
BROKER_ROLES = ("leader", "follower")  # whom a broker fault hits, relative to the partition's leader
HOLD_S = (0.5, 8.0)  # a fault's hold, uniform (kills: also 0, a bounce)
GAP_S = (1.0, 4.0)  # after a heal, before the next fault
BOUNCE = 0.25  # chance that a kill or power cut restarts at once


@dataclass(frozen=True)
class Step:
    kind: str
    role: str  # "leader", "follower" or "zookeeper"
    partition: int  # the partition whose leader the roles refer to
    pick: int  # 0-5: chooses among candidates (which follower, which peer; 6 divides by 2 and 3)
    direction: str  # one_way: "from" (the leader's packets dropped) or "to"; else ""
    hold_s: float
    gap_s: float
    cut_seed: int  # power_cut: the seed of the model's random choices
    # power_cut: "strict" drops every byte and entry no fsync covered, "random" keeps
    # some of them, now and then with a torn tail, as real disks do
    # (tests/faults/power_cut/model.py); by the cut seed's parity, not a draw of its own
    cut_mode: str = ""
    offset_s: float = 0.0  # clock steps: how far the date jumps (forward > 0, back < 0)
    after_s: float = 0.0  # an overlapping fault: seconds after the first fault began
    overlap: "Step | None" = None  # the second fault, overlapping this one (its gap_s unused)

    def __post_init__(self):
        if isinstance(self.overlap, dict):  # from JSON
            object.__setattr__(self, "overlap", Step(**self.overlap))

    def describe(self) -> str:
        text = self._describe_one()
        if self.overlap is not None:
            second = self.overlap._describe_one(quiet=False)
            if self.overlap.role != "zookeeper":
                second += " (another broker if that is the first's)"
            text = text.replace(", then", f"; overlapped {self.overlap.after_s:.1f} s in by {second}; then", 1)
        return text

    def _describe_one(self, quiet: bool = True) -> str:
        what = self.kind.replace("_", " ")
        if self.role == "zookeeper":
            target = "ZooKeeper"
        else:
            target = f"the {self.role} of partition {self.partition}"
            if self.role == "follower":
                target = f"follower #{self.pick} of partition {self.partition}"
        if self.kind == "one_way":
            target += f", packets {self.direction} it (peer #{self.pick})"
        if self.kind == "power_cut":
            target += f", {self.cut_mode} cut"
        if self.kind.startswith("clock_step"):
            target += f", {abs(self.offset_s):.0f} s {'forward' if self.offset_s > 0 else 'back'}"
        held = "down" if self.kind in DOWN_KINDS else "held"
        text = f"{what}: {target}, {held} {self.hold_s:.1f} s"
        return text + f", then {self.gap_s:.1f} s of quiet" if quiet else text


@dataclass(frozen=True)
class Schedule:
    seed: int
    steps: tuple

    def describe(self) -> list:
        return [f"{number}. {step.describe()}" for number, step in enumerate(self.steps, 1)]

    def kinds(self) -> list:
        return [step.kind for step in self.steps]

    def to_json(self) -> dict:
        return {"seed": self.seed, "steps": [asdict(step) for step in self.steps]}

    @classmethod
    def from_json(cls, record: dict) -> "Schedule":
        """The schedule ``to_json`` wrote (a regression's schedule is kept this way, so
        a later change to how seeds draw schedules does not change it)."""
        return cls(record["seed"], tuple(Step(**step) for step in record["steps"]))


def make_schedule(seed: int, steps: int = 3, partitions: int = 2, kinds=KINDS, overlap: float = OVERLAP) -> Schedule:
    """The schedule of ``seed``: ``steps`` faults of the given kinds (uniformly), each
    with a second, overlapping one with the chance ``overlap``."""
    rng = random.Random(seed)
    return Schedule(seed, tuple(_step_maybe_overlapped(rng, partitions, kinds, overlap) for _ in range(steps)))


def second_kinds(first: str, kinds=KINDS) -> list:
    """The kinds a second fault may have when the first is ``first``."""
    return [kind for kind in kinds
            if not (first in ZOOKEEPER_KINDS and kind in ZOOKEEPER_KINDS)
            and not (kind in LEADER_KINDS and first not in ZOOKEEPER_KINDS)]


def _step_maybe_overlapped(rng: random.Random, partitions: int, kinds, overlap: float) -> Step:
    step = _step(rng, partitions, kinds)
    overlapped = rng.random() < overlap
    candidates = second_kinds(step.kind, kinds)
    if not overlapped or step.hold_s < MIN_OVERLAPPED_HOLD_S or not candidates:
        return step
    after = round(rng.uniform(0.2, step.hold_s * 0.8), 1)
    second = _step(rng, partitions, candidates)
    return replace(step, overlap=replace(second, gap_s=0.0, after_s=after))


def _step(rng: random.Random, partitions: int, kinds) -> Step:
    kind = rng.choice(kinds)
    if kind in ZOOKEEPER_KINDS:
        role = "zookeeper"
    elif kind in LEADER_KINDS:
        role = "leader"
    else:
        role = rng.choice(BROKER_ROLES)
    hold = round(rng.uniform(*HOLD_S), 1)
    if kind in ("kill", "power_cut") and rng.random() < BOUNCE:
        hold = 0.0
    step = Step(kind=kind, role=role, partition=rng.randrange(partitions), pick=rng.randrange(6),
                direction=rng.choice(("from", "to")) if kind == "one_way" else "", hold_s=hold,
                gap_s=round(rng.uniform(*GAP_S), 1), cut_seed=rng.randrange(1 << 30))
    if kind == "power_cut":
        return replace(step, cut_mode="strict" if step.cut_seed % 2 == 0 else "random")
    if kind.startswith("clock_step"):  # by the cut seed too: its sign and a log-uniform size
        low, high = math.log(CLOCK_STEP_S[0]), math.log(CLOCK_STEP_S[1])
        size = math.exp(low + (high - low) * ((step.cut_seed >> 1) % 10_000) / 9_999)
        return replace(step, offset_s=round(size if step.cut_seed % 2 == 0 else -size))
    return step


def schedule_seeds(base_seed: int, count: int) -> list:
    """``count`` schedule seeds derived from one printed base seed."""
    rng = random.Random(base_seed)
    return [rng.randrange(1 << 31) for _ in range(count)]
