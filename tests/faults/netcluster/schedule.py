"""Fault schedules drawn from a seed: what the nemesis does, in which order, for how long.

Owns the choice and nothing else (no processes, no network): ``make_schedule(seed)``
is a pure function, so a seed printed by a run is enough to replay its schedule. Which
broker a step hits is named by role (the leader of a partition, one of its followers,
a broker of the cluster, ZooKeeper) and resolved when the step runs, since leaders move;
the step carries the index that picks among the candidates, so the replay resolves it
the same way when the cluster is in the same state.

A schedule is a few steps, one fault at a time: each step applies its fault, holds it
for ``hold_s`` (for a kill or a power cut: how long the broker stays down), heals it
(network routes and links restored, processes resumed or restarted) and waits
``gap_s`` before the next. Holds straddle the ZooKeeper session (4 s in these tests):
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
- ``pause_zookeeper`` and ``kill_zookeeper``: the same for the ZooKeeper server.
"""

import random
from dataclasses import asdict, dataclass, replace

KINDS = ("isolate", "cut_zookeeper", "split_leader_zookeeper", "one_way", "link_down", "pause", "kill", "power_cut",
         "pause_zookeeper", "kill_zookeeper")
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

    def describe(self) -> str:
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
        held = "down" if self.kind in ("kill", "power_cut", "kill_zookeeper") else "held"
        return f"{what}: {target}, {held} {self.hold_s:.1f} s, then {self.gap_s:.1f} s of quiet"


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


def make_schedule(seed: int, steps: int = 3, partitions: int = 2, kinds=KINDS) -> Schedule:
    """The schedule of ``seed``: ``steps`` faults of the given kinds (uniformly)."""
    rng = random.Random(seed)
    return Schedule(seed, tuple(_step(rng, partitions, kinds) for _ in range(steps)))


def _step(rng: random.Random, partitions: int, kinds) -> Step:
    kind = rng.choice(kinds)
    if kind in ("pause_zookeeper", "kill_zookeeper"):
        role = "zookeeper"
    elif kind in ("split_leader_zookeeper", "one_way"):
        role = "leader"
    else:
        role = rng.choice(BROKER_ROLES)
    hold = round(rng.uniform(*HOLD_S), 1)
    if kind in ("kill", "power_cut") and rng.random() < BOUNCE:
        hold = 0.0
    step = Step(kind=kind, role=role, partition=rng.randrange(partitions), pick=rng.randrange(6),
                direction=rng.choice(("from", "to")) if kind == "one_way" else "", hold_s=hold,
                gap_s=round(rng.uniform(*GAP_S), 1), cut_seed=rng.randrange(1 << 30))
    if kind != "power_cut":
        return step
    return replace(step, cut_mode="strict" if step.cut_seed % 2 == 0 else "random")


def schedule_seeds(base_seed: int, count: int) -> list:
    """``count`` schedule seeds derived from one printed base seed."""
    rng = random.Random(base_seed)
    return [rng.randrange(1 << 31) for _ in range(count)]
