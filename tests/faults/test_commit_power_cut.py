"""Power cuts under a consumer group's commits: no answered commit is lost.

A modern consumer group commits through the modern listener; a commit is a record
batch appended to ``__consumer_offsets`` and answered once the worker flushed it
(``Mode.ACK_FLUSH``, ``mpbroker/acceptor/kafka/offsets_topic.py``). The broker runs
under the power-cut shim (tests/faults/power_cut/, as ``test_power_cut.py``); in each
cycle a confluent-kafka consumer in a group (``power_cut.committer``, a process of its
own) reads a topic of a few partitions and commits as it reads, synchronously and
asynchronously; at a random moment the broker's whole process tree and the consumer
are SIGKILLed, ``log.dir`` becomes what a power cut would leave (``strict`` or
``random``) and the broker is started again under the shim. The first cut comes right
after the group's first answered commit, while ``__consumer_offsets``'s settings file
(``topic-configs/``, the first file there: the read topic is made on first use) and
partition directory are new; its segments are small, so it rolls between cuts.

Guarantees checked: every restart succeeds, without a CRITICAL line or a commit record
skipped or cut short in the coordinator's load; for every partition the group's
committed offset, read by a fresh consumer of the group (``committed()``), is at least
the last offset the broker answered a commit of before the cut (that one, or a later
commit that was in flight and survived), never lower and never absent; every log is
valid (record batches in the modern topics).

    MPBROKER_COMMIT_POWER_CUT_SEED=7 MPBROKER_COMMIT_POWER_CUT_CYCLES=100 pytest -s tests/faults/test_commit_power_cut.py
    MPBROKER_POWER_CUT_MODES=strict ...   (or random; both by default)

The seed is printed before anything runs, and a failure names it; it replays the
choices (modes, waits, each cut's draws, the consumer's commits), not the timing.
"""

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.harness import BrokerProcess
from tests.broker.test_faults import all_flushed, assert_logs_valid
from tests.faults.power_cut import CutMode, PowerCutRig
from tests.faults.test_power_cut import REPOSITORY, SYNC_DELAY_US, cut_modes

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("MPBROKER_COMMIT_POWER_CUT_SEED") or random.randrange(1 << 30))
CYCLES = int(os.environ.get("MPBROKER_COMMIT_POWER_CUT_CYCLES", "20"))  # about 30 s
TOPIC = "read"
GROUP = "committers"
PARTITIONS = 4
MESSAGES = 40_000  # enough for every cycle's commits to move on (each resumes at the last commit)
BROKER_PROPERTIES = {
    "num_workers": 2,
    "num_partitions": PARTITIONS,
    "group_initial_rebalance_delay_ms": 0,
    "offsets_topic_segment_bytes": 16384,  # __consumer_offsets rolls every few dozen commits
    "log_default_flush_interval_ms": 50,
    "log_default_flush_scheduler_interval_ms": 50,
    "log_flush_offset_checkpoint_interval_ms": 200,
}
COMMITS_BEFORE_CUT = (1, 5)  # answered commits in a cycle before the random wait starts (uniform)
MAX_WAIT_S = 1.0  # the cut comes up to this long after that (the first cut: at once, after the first commit)
TIMEOUT_S = 60.0


@dataclass
class Cycle:
    number: int
    mode: CutMode
    waited_s: float = 0.0
    answers: int = 0  # commits answered in this cycle
    answered: dict = field(default_factory=dict)  # partition -> the last answered offset, over every cycle so far
    report: object = None  # the model's CutReport
    restart_s: float | None = None  # None: the broker did not start again
    committed: dict = field(default_factory=dict)  # partition -> committed offset after the restart


class CommitterProcess:
    """``power_cut.committer`` in a process of its own; its answered commits, read as they come."""

    def __init__(self, bootstrap: str, seed: int, stderr_path: str):
        self.stderr_path = stderr_path
        self.answers = 0  # commits answered
        self.answered = {}  # partition -> the highest offset of an answered commit
        self._lock = threading.Condition()
        self._stderr = open(stderr_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.power_cut.committer", bootstrap, TOPIC, GROUP, str(seed)],
            cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            words = line.split()
            if words[:1] == ["answered"]:
                with self._lock:
                    self.answers += 1
                    for pair in words[1:]:
                        partition, offset = map(int, pair.split(":"))
                        self.answered[partition] = max(offset, self.answered.get(partition, offset))
                    self._lock.notify_all()
        with self._lock:
            self._lock.notify_all()  # it exited

    def wait_for_answers(self, count: int, timeout: float) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self.answers >= count or self.process.poll() is not None, timeout):
                raise AssertionError(f"seed {SEED}: {self.answers} commits answered in {timeout} s, not {count}")
        if self.process.poll() is not None:
            with open(self.stderr_path, errors="replace") as f:
                raise AssertionError(f"seed {SEED}: the committer exited with {self.process.returncode}:\n"
                                     f"{f.read()[-3000:]}")

    def kill(self) -> dict:
        """SIGKILL it; the answers it printed (all of them given before the broker died)."""
        self.process.kill()
        self.process.wait(10)
        self._reader.join(10)
        self._stderr.close()
        with self._lock:
            return dict(self.answered)


def fill_topic(broker) -> None:
    """MESSAGES into TOPIC, made on first use (so ``__consumer_offsets.json`` is the first
    file of ``topic-configs/``, its directory made when the group looks its coordinator up)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for i in range(MESSAGES):
        producer.produce(TOPIC, value=b"m-%d" % i, partition=i % PARTITIONS)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    broker.wait_until(all_flushed, timeout=TIMEOUT_S, what="the topic flushed")


def committed_offsets(broker) -> dict:
    """partition -> the group's committed offset (negative: none), asked by a fresh consumer."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert all(tp.error is None for tp in found), found
    return {tp.partition: tp.offset for tp in found}


def lost_commits(cycle: Cycle) -> dict:
    """partition -> (last answered, committed now) where the committed offset is lower or absent."""
    return {partition: (offset, cycle.committed.get(partition, -1)) for partition, offset in cycle.answered.items()
            if cycle.committed.get(partition, -1) < offset}


def later_commits_found(cycles) -> int:
    """Cuts after which a partition's committed offset was past the last answered one, and
    new (a commit in flight at that cut survived it, or its answer was not read)."""
    found, before = 0, {}
    for cycle in cycles:
        found += any(cycle.committed.get(p, -1) > max(o, before.get(p, -1)) for p, o in cycle.answered.items())
        before = cycle.committed
    return found


def cycle_table(cycles) -> str:
    rows = ["| cycle | mode | waited | commits answered | last answered | committed after | bytes dropped "
            "| entries removed | kept unsynced | torn | restart |", "|---" * 11 + "|"]
    for cycle in cycles:
        report = cycle.report
        rows.append(f"| {cycle.number} | {cycle.mode} | {cycle.waited_s:.2f} s | {cycle.answers} "
                    f"| {dict(sorted(cycle.answered.items()))} | {dict(sorted(cycle.committed.items())) or '-'} "
                    f"| {report.bytes_dropped} | {len(report.removed)} | {len(report.kept_unsynced)} "
                    f"| {len(report.torn)} | {'refused' if cycle.restart_s is None else f'{cycle.restart_s:.1f} s'} |")
    return "\n".join(rows)


def broker_output_since_start(broker) -> str:
    return broker.output().split("mpbroker 0 starting")[-1]


def run_cycle(number, mode, rng, broker, rig, answered, work) -> Cycle:
    """One cycle: commits, a cut at a random moment, a restart, the committed offsets read."""
    cycle = Cycle(number, mode)
    committer = CommitterProcess(broker.bootstrap, rng.randrange(1 << 30), str(work / "committer.err"))
    try:
        first = number == 1  # the group's first commits: __consumer_offsets and its files are new
        committer.wait_for_answers(1 if first else rng.randint(*COMMITS_BEFORE_CUT), TIMEOUT_S)
        cycle.waited_s = 0.0 if first else rng.uniform(0, MAX_WAIT_S)
        time.sleep(cycle.waited_s)
        broker.kill_tree()
    finally:
        this_cycle = committer.kill()
    cycle.answers = committer.answers
    for partition, offset in this_cycle.items():
        answered[partition] = max(offset, answered.get(partition, offset))
    cycle.answered = dict(answered)
    cycle.report = rig.cut(mode, random.Random(rng.randrange(1 << 30)))
    started = time.monotonic()
    try:
        broker.start()
    except RuntimeError:  # it exited (refused) or never became ready
        return cycle
    cycle.restart_s = time.monotonic() - started
    cycle.committed = committed_offsets(broker)
    return cycle


@pytest.mark.timeout(max(300, 15 * CYCLES))  # about 5 s a cycle
def test_power_cuts_lose_no_answered_commit(tmp_path, shim_library, capsys):
    with capsys.disabled():  # before anything runs, so that a hang or a crash can be replayed
        print(f"\ncommit power cuts: {CYCLES} with MPBROKER_COMMIT_POWER_CUT_SEED={SEED} "
              f"MPBROKER_POWER_CUT_MODES={os.environ.get('MPBROKER_POWER_CUT_MODES', 'strict,random')}", flush=True)
    rng = random.Random(SEED)
    rig = PowerCutRig(str(tmp_path / "broker" / "logs"), str(tmp_path / "power-cut"), shim_library,
                      sync_delay_us=SYNC_DELAY_US)
    broker = BrokerProcess(tmp_path / "broker", env=rig.environment(), **BROKER_PROPERTIES)
    assert os.path.realpath(broker.log_dir) == rig.root
    cycles, answered = [], {}
    try:
        broker.start()
        fill_topic(broker)
        for number, mode in enumerate(cut_modes(rng, CYCLES), 1):
            cycle = run_cycle(number, mode, rng, broker, rig, answered, tmp_path)
            cycles.append(cycle)
            if cycle.restart_s is None:
                pytest.fail(f"seed {SEED}: the broker refused to start after power cut {number} ({mode}): "
                            f"{cycle.report.summary()}\n\n{cycle_table(cycles)}\n\n"
                            f"broker output since the last start:\n{broker_output_since_start(broker)}", pytrace=False)
            lost = lost_commits(cycle)
            assert not lost, (f"seed {SEED}: power cut {number} ({mode}) lost answered commits, partition -> "
                              f"(last answered, committed after the restart): {lost}\nthe cut: "
                              f"{cycle.report.summary()}\n\n{cycle_table(cycles)}\n\nbroker output since the "
                              f"last start:\n{broker_output_since_start(broker)}")
            damage = [line for line in broker_output_since_start(broker).splitlines()
                      if "CRITICAL" in line or "Traceback" in line or "skipped" in line or "damaged batch" in line]
            assert not damage, f"seed {SEED}: after power cut {number} ({mode}):\n" + "\n".join(damage)
        broker.wait_until(all_flushed, timeout=TIMEOUT_S, what="every appended byte flushed")
        assert broker.stop() == 0
    finally:
        broker.close()
    assert_logs_valid(broker.log_dir)
    reports = [cycle.report for cycle in cycles]
    print(f"seed {SEED}: {len(cycles)} power cuts ({sum(c.mode is CutMode.STRICT for c in cycles)} strict), "
          f"{sum(cycle.answers for cycle in cycles)} commits answered, none lost; a later commit, in flight at the "
          f"cut, found after {later_commits_found(cycles)} cuts; model dropped "
          f"{sum(r.bytes_dropped for r in reports)} bytes and {sum(len(r.removed) for r in reports)} entries, "
          f"kept {sum(len(r.kept_unsynced) for r in reports)} unsynced entries, tore {sum(len(r.torn) for r in reports)} "
          f"tails; restarts took at most {max(c.restart_s for c in cycles):.1f} s; "
          f"{rig.unparsed_lines} event lines cut short by the kills")
    print(cycle_table(cycles))
    shutil.rmtree(rig.root)  # kept when the test fails, for a post-mortem
