"""The two newer kinds of fault schedule step, each on real servers in network
namespaces (tests/faults/netcluster/):

- A clock step: the leader's date jumps half an hour back, then an hour forward (from
  there), each held a little less than the ZooKeeper session and longer than the
  replica lag time, then back to the real date, under durability-2 load. Each step is
  first checked to apply (the time stamp of a line the broker logs), so the test
  cannot pass with libfaketime not loaded.
  Timers run on the monotonic clock: the leader stays, in the same epoch, the ISR never
  shrinks, every acknowledged message reads back once, in order, and the logs end
  byte-identical.
- An overlap: the leader of partition 0 isolated and, a second into it, a follower's
  power cut (a strict one: every byte no fsync covered dropped) with the two faults
  resolved to different brokers, run through the schedule runner (workload, history,
  checker): nothing acknowledged at durability 2 lost, no divergence, and the history
  shows the two faults overlapping, each with its own times.
- A process on a stepped date (no servers): ``time.sleep`` sleeps (libfaketime 0.9.10
  alone makes it raise EINVAL under Python 3.11: ``netcluster/monotonic_sleep.c``) and
  ``time.time`` is the stepped date.
- Overlapping network faults (no servers): each heals only what it took, and a route
  two of them hold stays until both are healed; ``heal()`` still heals everything.
"""

import itertools
import os
import subprocess
import sys
import time

from tests.faults.netcluster.clock import FakeClock, broker_date_offset_s, build_sleep_fix
from tests.faults.netcluster.cluster import BROKER_IDS, BROKER_PORT, SESSION_MS
from tests.faults.netcluster.history import History
from tests.faults.netcluster.network import ip
from tests.faults.netcluster.runner import PARTITIONS, run_schedule
from tests.faults.netcluster.schedule import Schedule, Step

HOLD_S = SESSION_MS / 1000 - 1  # shorter than the session, longer than the replica lag time (1.5 s)
def step_and_check(cluster, member, offset_s: float) -> None:
    cluster.step_clock(member, offset_s)
    seen = broker_date_offset_s(cluster.brokers[member], BROKER_PORT, cluster.brokers[member].host)
    assert abs(seen - offset_s) < 5, f"{member}'s date is {seen:+.0f} s off, not {offset_s:+.0f} s: no libfaketime?"


def produce_for(cluster, topic: str, seconds: float, prefix: str, acked: list, isr_seen: set) -> None:
    """Durability-2 batches for ``seconds``, noting every ISR seen between them."""
    deadline = time.monotonic() + seconds
    for index in itertools.count():
        if time.monotonic() >= deadline:
            return
        payloads = [f"{prefix}-{index}-{part}".encode() for part in range(3)]
        cluster.produce_until_acked(topic, payloads, timeout=20)
        acked += payloads
        isr_seen.add(tuple(sorted(cluster.isr(topic))))


def test_clock_steps_on_the_leader_move_nothing_and_lose_nothing(netcluster):
    cluster = netcluster
    cluster.create_topic("clk", 1, 3)
    leader, _ = cluster.produce_until_acked("clk", [b"first"])
    acked, isr_seen = [b"first"], set()
    cluster.wait_isr("clk", BROKER_IDS)
    before = cluster.state("clk")
    step_and_check(cluster, leader, 0)
    produce_for(cluster, "clk", 1, "before", acked, isr_seen)

    step_and_check(cluster, leader, -1800)
    produce_for(cluster, "clk", HOLD_S, "back", acked, isr_seen)
    step_and_check(cluster, leader, +1800)  # an hour forward from there
    produce_for(cluster, "clk", HOLD_S, "forward", acked, isr_seen)
    step_and_check(cluster, leader, 0)
    produce_for(cluster, "clk", 1, "after", acked, isr_seen)

    after = cluster.state("clk")
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch), (before, after)
    assert isr_seen == {tuple(sorted(BROKER_IDS))}, f"the ISR shrank under a clock step: {isr_seen}"
    assert cluster.registered() == set(BROKER_IDS)
    cluster.check_read_back("clk", acked)
    cluster.wait_identical("clk")


def test_a_follower_power_cut_while_the_leader_is_isolated_loses_no_acknowledged_write(tmp_path, shim_library):
    isolate = Step(kind="isolate", role="leader", partition=0, pick=0, direction="", hold_s=6.0, gap_s=1.0,
                   cut_seed=0, overlap=Step(kind="power_cut", role="follower", partition=0, pick=1, direction="",
                                            hold_s=2.0, gap_s=0.0, cut_seed=4, cut_mode="strict", after_s=1.0))
    result = run_schedule(Schedule(35, (isolate,)), str(tmp_path), shim_library)
    print(result.text())
    assert result.ok, result.text()
    faults = {fault.kind: fault for fault in History.load(result.history_path).faults}
    first, second = faults["isolate"], faults["power_cut"]
    assert first.target != second.target, "the two faults hit the same broker"
    assert first.start + 0.9 < second.start < first.end, "the power cut began during the isolation"
    assert second.end - second.start > 2.0 and first.end - first.start > 5.9
    assert PARTITIONS == 2 and "overlapped 1.0 s in by: power-cut" in result.applied[0]


def blackholes(network, node) -> set:
    """The blackhole routes the kernel holds in ``node``'s namespace."""
    listed = ip("-n", node.namespace, "route", "show", "type", "blackhole")
    return {line.split()[1] for line in listed.splitlines() if line.strip()}


def link_is_up(node) -> bool:
    return "state UP" in ip("-o", "link", "show", node.host_link) or ",UP" in ip("-o", "link", "show", node.host_link)


def test_overlapping_network_faults_heal_each_on_its_own(network):
    a, b, c = (network.add_node(name) for name in ("a", "b", "c"))
    isolated = network.isolate(a)
    dropped = network.drop_one_way(a, b)  # a route the isolation holds too
    down = network.link_down(c)
    assert blackholes(network, a) == {b.address, c.address, network.gateway}

    network.heal(isolated)  # the one-way drop still holds a -> b, and c's link stays down
    assert blackholes(network, a) == {b.address}
    assert blackholes(network, b) == set() and blackholes(network, c) == set()
    assert not link_is_up(c)
    network.heal(down)
    assert link_is_up(c) and blackholes(network, a) == {b.address}
    network.heal(dropped)
    assert blackholes(network, a) == set() and network.faults() == {"blocked": [], "down": []}

    network.isolate(b)
    network.link_down(c)
    network.heal()  # everything, as before
    assert blackholes(network, b) == set() and link_is_up(c) and network.faults() == {"blocked": [], "down": []}


def test_a_process_on_a_stepped_date_sleeps_on_the_monotonic_clock(tmp_path):
    clock = FakeClock(str(tmp_path / "clock"), build_sleep_fix(str(tmp_path / "fix")))
    clock.step(-3600)
    probe = ("import time; started = time.monotonic(); time.sleep(0.2); slept = time.monotonic() - started; "
             "print(slept, time.time())")
    run = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **clock.environment()}, capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    slept, date = map(float, run.stdout.split())
    assert 0.2 <= slept < 1.0
    assert abs(date - (time.time() - 3600)) < 5, "the date did not move: libfaketime not loaded?"
