"""The nemesis: applies a ``Schedule``'s steps to a running ``NetCluster`` and records
each fault in the ``History``.

Owns the mapping from a step (a kind and a role, ``schedule``) to what is done to the
network and the processes, and the heal after each hold. A step's target is resolved
when it runs: the partition's leader as ZooKeeper names it then (a broker picked by the
step's index when there is none), a follower by the step's index among the others.
Every step ends healed: blackhole routes removed and links up (``Network.heal``),
paused processes resumed, killed ones restarted, stepped dates back to the real one.
``run`` returns one line per applied step, with the time since the start, for the
run's report.

A step with an overlapping second fault (``Step.overlap``) resolves both targets when
it begins (the second names another member than the first: another broker stands in,
picked by its index, if its role resolves to the first's), then runs the second on a
thread of its own that waits ``after_s`` and applies, holds and heals it, while this
thread does the same for the first; each fault is begun and ended in the history at
its own times, and each network fault heals only what it took (``Network.heal(fault)``),
so neither heal ends the other early. The step returns once both are healed.
"""

import random
import threading
import time
from dataclasses import replace

from tests.faults.power_cut import CutMode

from .cluster import ZOOKEEPER
from .schedule import LEADER_KINDS, ZOOKEEPER_KINDS


class Nemesis:
    def __init__(self, cluster, network, history, topic: str, log=None):
        self.cluster = cluster
        self.network = network
        self.history = history
        self.topic = topic
        self.log = log or (lambda line: None)
        self.applied = []  # one line per step, as run

    def run(self, schedule, started: float) -> list:
        for step in schedule.steps:
            line = self.apply(step)
            self.applied.append(f"{time.monotonic() - started:6.1f}s {line}")
            self.log(self.applied[-1])
            time.sleep(step.gap_s)
        return self.applied

    # --- one step ---------------------------------------------------------------------

    def apply(self, step) -> str:
        """Apply, hold and heal one step (and its overlapping fault): a line saying what was done."""
        leader, member, _ = self._resolve(step)
        if step.overlap is None:
            return self._apply_one(step, leader, member)
        second_leader, second_member, stood_in = self._resolve(step.overlap, avoid=member)
        overlap = step.overlap
        if stood_in:  # another broker stands in: say so in the line
            overlap = replace(overlap, role=f"standing in for the {overlap.role}")
        outcome = {}

        def run_second():
            try:
                time.sleep(overlap.after_s)
                outcome["line"] = self._apply_one(overlap, second_leader, second_member)
            except BaseException as exc:  # noqa: BLE001 - raised again on the nemesis's thread
                outcome["error"] = exc

        thread = threading.Thread(target=run_second, name="nemesis-overlap", daemon=True)
        thread.start()
        try:
            line = self._apply_one(step, leader, member)
        finally:
            thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return f"{line}; overlapped {step.overlap.after_s:.1f} s in by: {outcome['line']}"

    def _apply_one(self, step, leader, member) -> str:
        """Apply, hold and heal one fault on its resolved leader and member."""
        broker = member
        if step.kind == "isolate":
            return self._network_fault(step, f"b{broker}", lambda: self.network.isolate(self._node(broker)),
                                       f"isolated broker {broker} ({step.role})")
        if step.kind == "cut_zookeeper":
            return self._network_fault(step, f"b{broker}|zk",
                                       lambda: self.network.partition([self._node(broker)], [self._node(ZOOKEEPER)]),
                                       f"cut broker {broker} ({step.role}) from ZooKeeper")
        if step.kind == "split_leader_zookeeper":
            others = [b for b in self.cluster.broker_ids if b != leader]
            return self._network_fault(step, f"b{leader},zk|" + ",".join(f"b{b}" for b in others),
                                       lambda: self.network.partition([self._node(leader), self._node(ZOOKEEPER)],
                                                                      [self._node(b) for b in others]),
                                       f"split leader {leader} and ZooKeeper from brokers {others}")
        if step.kind == "one_way":
            peers = [*(b for b in self.cluster.broker_ids if b != leader), ZOOKEEPER]
            peer = peers[step.pick % len(peers)]
            source, destination = (leader, peer) if step.direction == "from" else (peer, leader)
            name = {source: _name(source), destination: _name(destination)}
            return self._network_fault(step, f"{name[source]}->{name[destination]}",
                                       lambda: self.network.drop_one_way(self._node(source), self._node(destination)),
                                       f"dropped packets from {name[source]} to {name[destination]} "
                                       f"(leader {leader})")
        if step.kind == "link_down":
            return self._network_fault(step, f"b{broker}", lambda: self.network.link_down(self._node(broker)),
                                       f"took the link of broker {broker} ({step.role}) down")
        if step.kind in ("pause", "pause_zookeeper"):
            fault = self.history.begin_fault(step.kind, _name(member))
            try:
                self.cluster.pause(member)
                time.sleep(step.hold_s)
            finally:
                self.cluster.resume(member)
                self.history.end_fault(fault)
            return f"paused {_name(member)} ({step.role}) for {step.hold_s:.1f} s"
        if step.kind == "clock_step":
            fault = self.history.begin_fault(step.kind, f"{_name(member)} {step.offset_s:+.0f}s")
            try:
                self.cluster.step_clock(member, step.offset_s)
                time.sleep(step.hold_s)
            finally:
                self.cluster.step_clock(member, 0)
                self.history.end_fault(fault)
            return (f"stepped the date of {_name(member)} ({step.role}) {step.offset_s:+.0f} s for "
                    f"{step.hold_s:.1f} s, then back to the real date")
        if step.kind in ("kill", "kill_zookeeper", "power_cut"):
            fault = self.history.begin_fault(step.kind, _name(member))
            detail = ""
            try:
                if step.kind == "power_cut":
                    report = self.cluster.power_cut(member, random.Random(step.cut_seed), CutMode(step.cut_mode))
                    detail = f" ({report.summary()})"
                else:
                    self.cluster.kill(member)
                time.sleep(step.hold_s)
                restarted = time.monotonic()
                self.cluster.restart(member)  # a broker that does not start again fails the run here
            finally:
                self.history.end_fault(fault)
            verb = "power-cut" if step.kind == "power_cut" else "killed"
            return (f"{verb} {_name(member)} ({step.role}){detail}, down {step.hold_s:.1f} s, "
                    f"ready {time.monotonic() - restarted:.1f} s after its restart")
        raise ValueError(f"unknown fault kind {step.kind!r}")

    def _network_fault(self, step, target: str, apply, what: str) -> str:
        fault = self.history.begin_fault(step.kind, target)
        taken = None
        try:
            taken = apply()
            time.sleep(step.hold_s)
        finally:
            if taken is not None:
                self.network.heal(taken)  # only this fault's routes and links: an overlapping one holds
            self.history.end_fault(fault)
        return f"{what} for {step.hold_s:.1f} s"

    def _resolve(self, step, avoid=None) -> tuple:
        """``(leader, member, stood_in)``: the step's partition's leader now and the
        member its fault hits (ZooKeeper, the leader, or a follower by the step's index);
        another broker, picked by the index, if that member is ``avoid`` (``stood_in``)."""
        leader, follower = self._targets(step)
        if step.kind in ZOOKEEPER_KINDS:
            member = ZOOKEEPER
        elif step.kind in LEADER_KINDS:
            member = leader
        else:
            member = follower if step.role == "follower" else leader
        if avoid is not None and member == avoid:
            others = [b for b in self.cluster.broker_ids if b != avoid]
            return leader, others[step.pick % len(others)], True
        return leader, member, False

    def _targets(self, step) -> tuple:
        """``(leader, follower)`` of the step's partition now (a broker picked by the
        step's index stands in for a leader while there is none)."""
        brokers = list(self.cluster.broker_ids)
        try:
            leader = self.cluster.leader(self.topic, step.partition)
        except Exception:  # noqa: BLE001 - ZooKeeper unreachable for a moment: pick one
            leader = None
        if leader is None:
            leader = brokers[step.pick % len(brokers)]
        others = [b for b in brokers if b != leader]
        return leader, others[step.pick % len(others)]

    def _node(self, member):
        return self.cluster.node(member)


def _name(member) -> str:
    return "ZooKeeper" if member == ZOOKEEPER else f"b{member}"
