"""Modern consumer groups (Kafka's classic group protocol on ``kafka.port``): how long a
rebalance takes (a lone member's first join, a second member joining, a clean leave, a
crash) and how many offset commits a second one coordinator answers, with confluent-kafka
(librdkafka) clients; beside Apache Kafka 4.4 in the same run (``--kafka``).

    python -m bench.group_bench [--kafka] [--repeats 5] [--commit-seconds 3] [--dir D] [--results-dir D]

Brokers: ``LocalBroker`` standalone at its defaults (``num.workers`` = the cores,
``group.initial.rebalance.delay.ms`` 3000, ``offsets.topic.num.partitions`` 50; a commit is
answered once its record of ``__consumer_offsets`` is flushed to disk), and with ``--kafka``
one Kafka KRaft node (``mpbroker.testing.apache_kafka``) set to Kafka's own defaults for
groups: ``group.initial.rebalance.delay.ms`` 3000 and ``offsets.topic.num.partitions`` 50
(that harness's are 0 and 1); Kafka answers a commit once appended (acks=-1 of an ISR of
one), without a flush. A second pair, each with ``group.initial.rebalance.delay.ms=0``,
runs the "delay 0" rows. All of them are up for the whole run. Topic ``group-bench`` of 6
partitions on each (CreateTopics); a fresh group id for every run. One warm-up of every
kind on every broker before the clock (it creates ``__consumer_offsets``).

Members: each consumer is a process of its own (``bench/group_bench_member.py``), a
confluent-kafka ``Consumer`` at librdkafka's defaults (``session.timeout.ms`` 45000,
``heartbeat.interval.ms`` 3000, ``partition.assignment.strategy`` range,roundrobin:
eager) but ``enable.auto.commit=false`` and what a row says, polling in a loop
(``poll(0.01)``; the rebalance callbacks run inside it) and reporting each
``on_assign``/``on_revoke`` with ``time.monotonic()`` (one clock for every process of
the machine). Processes are started, connected and their metadata fetched before any clock.

Rebalance rows (a run of each, in this order, in one group on each broker):

1. ``first_join``: a lone member's ``subscribe()`` until its ``on_assign`` of the 6
   partitions. Includes ``group.initial.rebalance.delay.ms`` (3 s): Kafka's deliberate
   wait for more members of a new group; ``first_join_protocol`` is the same runs minus it.
2. ``second_join``: a second member's ``subscribe()`` to the Stable group of row 1 until
   both members hold their new assignment (the last rebalance callback of each after the
   subscribe is an ``on_assign``, the two assignments disjoint and all 6 partitions).
   The incumbent learns of the rebalance from its next heartbeat only (the classic
   protocol has no other way to tell it; ``heartbeat.interval.ms``, 3 s by default), so
   it is split: ``..._told`` until the incumbent's ``on_revoke``, ``..._rebalance`` from
   there to settled (the protocol's own time).
3. ``leave``: the second member's ``close()`` (a LeaveGroup) until the survivor holds the 6
   partitions; split as row 2 (the survivor too learns it by heartbeat).
4. ``crash``: a third member with ``session.timeout.ms=6000`` joins (not measured), then
   it is SIGKILLed: from the kill until the survivor holds the 6 partitions. The
   coordinator notices at the end of the dead member's session (6 s after its last
   heartbeat, 0-3 s before the kill), the survivor at its next heartbeat after that.

With the delay-0 brokers (``group.initial.rebalance.delay.ms=0``) and both members at
``heartbeat.interval.ms=100``: ``first_join_delay0``, ``second_join_fast``,
``leave_fast``: rows 1-3 without the deliberate delays.

Commit rows (a group of its own, its members joined before the clock; each commit is of
partition 0 of the topic, a new offset each, as a member of the group):

5. ``commit_sync``: one consumer, ``commit(offsets=..., asynchronous=False)`` in a loop
   for ``--commit-seconds``: commits/s, latency p50/p99.
6. ``commit_async``: one consumer, ``commit(offsets=..., asynchronous=True)`` for
   ``--commit-seconds`` with at most 1,000 unanswered, then every answer awaited
   (``on_commit`` callbacks, each checked): answered commits/s from the first commit to
   the last answer.
7. ``commit_sync_x4``: 4 consumers (processes), each in a group of its own, row 5's loop
   at the same moment, against the same coordinator: total commits/s over the window.

Afterwards the group's committed offset is read back and must be the last one committed.
Targets (issue 32): a clean join or leave settled in under 1 s outside the deliberate
delays; 10,000 commits/s on one coordinator, judged on the best of rows 5-7.

Repeats: ``--repeats`` (5) rounds; in each, every row runs once on every broker, the
brokers taking turns (forward in even rounds, backward in odd ones). The tables give the
median and best of each row and mpbroker's median over Kafka's. Every run, the settings,
the versions and the machine go to ``bench/results/group_bench.{json,md}``.
"""

import argparse
import contextlib
import importlib.metadata
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_process import BenchBroker
from bench.common import RESULTS_DIR, print_table, write_results
from bench.interrupts import stop_on_signals
from bench.modern_bench import git_commit, java_version
from mpbroker.group_coordinator.records import partition_for
from mpbroker.testing import apache_kafka
from mpbroker.testing.process_cpu import cpu_seconds, tree_cpu_seconds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "group-bench"
PARTITIONS = 6
ALL = list(range(PARTITIONS))
INITIAL_DELAY_S = 3.0  # group.initial.rebalance.delay.ms of both brokers' defaults
CRASH_SESSION_MS = 6000
FAST = {"heartbeat.interval.ms": 100}
DEFAULT_HEARTBEAT_MS = 3000  # librdkafka's heartbeat.interval.ms
ASYNC_WINDOW = 1000
CONSUMERS_X4 = 4
COMMIT_TARGET = 10_000
SETTLE_TARGET_S = 1.0
QUIET = {"log_level": 3}
SIZES = {"repeats": 5, "commit_seconds": 3.0}

LABELS = {
    "first_join": "first join of a lone member (includes the 3 s group.initial.rebalance.delay.ms)",
    "first_join_protocol": "  the same, minus the 3 s deliberate delay",
    "second_join": "a second member joins a Stable group of one: both assigned",
    "second_join_told": "  of which until the incumbent's on_revoke (its next heartbeat, interval 3 s)",
    "second_join_rebalance": "  of which the rebalance after it",
    "leave": "clean leave (close()) of one of two: survivor holds all",
    "leave_told": "  of which until the survivor's on_revoke (its next heartbeat)",
    "leave_rebalance": "  of which the rebalance after it",
    "crash": f"crash (SIGKILL) of one of two, its session.timeout.ms={CRASH_SESSION_MS}: survivor holds all",
    "first_join_delay0": "first join, group.initial.rebalance.delay.ms=0",
    "second_join_fast": "second join, delay 0 brokers, heartbeat.interval.ms=100",
    "leave_fast": "clean leave, heartbeat.interval.ms=100",
    "commit_sync": "sync commits, one consumer",
    "commit_async": f"async commits, one consumer (<= {ASYNC_WINDOW} unanswered)",
    "commit_sync_x4": f"sync commits, {CONSUMERS_X4} consumers in {CONSUMERS_X4} groups, total",
}
REBALANCE_ROWS = ["first_join", "first_join_protocol", "second_join", "second_join_told", "second_join_rebalance",
                  "leave", "leave_told", "leave_rebalance", "crash", "first_join_delay0", "second_join_fast",
                  "leave_fast"]
COMMIT_ROWS = ["commit_sync", "commit_async", "commit_sync_x4"]
# the rows judged against "settles in under 1 s outside the deliberate delays"
SETTLE_JUDGED = ["first_join_protocol", "second_join_rebalance", "leave_rebalance", "first_join_delay0",
                 "second_join_fast", "leave_fast"]


# --- members ----------------------------------------------------------------------------------


class MemberProcess:
    """A ``bench.group_bench_member`` process; its events (dicts) as they come."""

    def __init__(self, bootstrap: str, group: str, config: dict | None = None, log_dir: str | None = None):
        settings = {"bootstrap": bootstrap, "group": group, "topic": TOPIC, "config": config or {}}
        self.name = group
        self.stderr = tempfile.TemporaryFile(dir=log_dir)
        self.process = subprocess.Popen([sys.executable, "-m", "bench.group_bench_member", json.dumps(settings)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                        cwd=REPO, text=True, bufsize=1)
        self.events = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.changed:
                self.events.append(json.loads(line))
                self.changed.notify_all()
        with self.changed:
            self.events.append({"event": "exit", "t": time.monotonic()})
            self.changed.notify_all()

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def wait(self, event: str, after: float = 0.0, timeout: float = 60.0) -> dict:
        """The first ``event`` at or after ``after``."""
        return wait_for([self], lambda: self.find(event, after), timeout, f"{self.name}: {event}")

    def find(self, event: str, after: float = 0.0):
        for found in self.events:
            if found["event"] == "error":
                raise RuntimeError(f"{self.name}: {found['what']}")
            if found["event"] == "exit" and event != "exit":
                raise RuntimeError(f"{self.name} exited: {self.error_output()}")
            if found["event"] == event and found["t"] >= after:
                return found
        return None

    def rebalances(self, after: float) -> list:
        return [e for e in self.events if e["event"] in ("assign", "revoke", "lost") and e["t"] >= after]

    def error_output(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-2000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def close(self) -> None:
        """``close()`` in the member, then the process's end."""
        if self.process.poll() is None:
            try:
                self.send("close")
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.stderr.close()


def wait_for(members: list, found, timeout: float, what: str):
    """``found()`` (under the members' conditions: called again whenever one has an event)
    once it is not None; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = found()
        if result is not None:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{what}: nothing in {timeout} s; events: "
                               f"{[(m.name, [e['event'] for e in m.events][-8:]) for m in members]}")
        with members[0].changed:
            members[0].changed.wait(min(left, 0.01))


def settled(members: list, after: float, timeout: float = 60.0) -> dict:
    """Wait until each member's last rebalance callback since ``after`` is an ``on_assign``,
    and those assignments split the topic's partitions; the moment (the latest of those
    callbacks) and each member's first ``on_revoke`` since ``after``."""
    def check():
        assigned = []
        for member in members:
            member.find("-", after)  # raises if it failed or exited
            events = member.rebalances(after)
            if not events or events[-1]["event"] != "assign":
                return None
            assigned.append(events[-1])
        partitions = sorted(p for event in assigned for p in event["partitions"])
        if partitions != ALL:
            return None
        revokes = [next((e["t"] for e in m.rebalances(after) if e["event"] in ("revoke", "lost")), None)
                   for m in members]
        return {"t": max(event["t"] for event in assigned), "revoked": revokes,
                "assignments": [event["partitions"] for event in assigned]}
    return wait_for(members, check, timeout, f"settling of {[m.name for m in members]}")


class Members:
    """Member processes started for a run, each closed (or killed) at its end."""

    def __init__(self, bootstrap: str, log_dir: str | None):
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.started = []

    def start(self, *members: tuple) -> list:
        """A process for each ``(group, config)``, started together; once each is ready."""
        started = [MemberProcess(self.bootstrap, group, config, self.log_dir) for group, config in members]
        self.started.extend(started)
        for member in started:
            member.wait("ready")
        return started

    def __enter__(self) -> "Members":
        return self

    def __exit__(self, *exc) -> None:
        for member in self.started:
            if exc[0] is None:
                member.close()
            else:
                member.kill()


def subscribe(member: MemberProcess) -> float:
    """``subscribe`` in the member; the time it was called there."""
    started = time.monotonic()
    member.send("subscribe")
    return member.wait("subscribe", started)["t"]


# --- rebalance runs ----------------------------------------------------------------------------


def rebalance_run(broker, group: str, log_dir, phases: list, crash: bool = True, config: dict | None = None) -> dict:
    """Rows 1-4 (``crash=False``: 1-3) in one group; seconds of each, and their parts.
    ``phases``: how long to wait after each settling before the next event (a fraction of
    the heartbeat interval: where in its heartbeat cycle the incumbent is hit)."""
    interval_s = (config or {}).get("heartbeat.interval.ms", DEFAULT_HEARTBEAT_MS) / 1000
    result = {"phases_s": [phase * interval_s for phase in phases]}
    with Members(broker.bootstrap, log_dir) as members:
        crashing = [(group, {**(config or {}), "session.timeout.ms": CRASH_SESSION_MS})] if crash else []
        first, second, *rest = members.start((group, config), (group, config), *crashing)
        third = rest[0] if crash else None
        t0 = subscribe(first)
        result["first_join"] = settled([first], t0)["t"] - t0
        time.sleep(phases[0] * interval_s)
        t0 = subscribe(second)
        both = settled([first, second], t0)
        result["second_join"] = both["t"] - t0
        result["second_join_told"] = both["revoked"][0] - t0
        result["second_join_rebalance"] = both["t"] - both["revoked"][0]
        result["second_join_assignments"] = both["assignments"]
        time.sleep(phases[1] * interval_s)
        started = time.monotonic()
        second.send("close")
        t0 = second.wait("close", started)["t"]
        alone = settled([first], t0)
        result["leave"] = alone["t"] - t0
        result["leave_told"] = alone["revoked"][0] - t0
        result["leave_rebalance"] = alone["t"] - alone["revoked"][0]
        result["leave_close_s"] = second.wait("closed", t0)["t"] - t0
        if crash:
            t0 = subscribe(third)
            both = settled([first, third], t0)
            result["crash_member_join"] = both["t"] - t0  # (not a row: the third member's join)
            time.sleep(phases[2] * interval_s)
            t0 = time.monotonic()
            third.kill()
            alone = settled([first], t0)
            result["crash"] = alone["t"] - t0
            result["crash_told"] = alone["revoked"][0] - t0
            result["crash_to_session"] = result["crash"] / (CRASH_SESSION_MS / 1000)
    return result


# --- commit runs -------------------------------------------------------------------------------


def percentile(values: list, fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cpu_now(broker, members: list) -> dict:
    """CPU seconds so far: the broker's whole tree, mpbroker's acceptor and workers, the members."""
    cpu = {"broker": tree_cpu_seconds(broker.process.pid),
           "clients": sum(cpu_seconds(member.process.pid, 0.0) for member in members)}
    if isinstance(broker, BenchBroker):
        status = broker.status()
        cpu["acceptor"] = cpu_seconds(status["acceptor"]["pid"], 0.0)
        cpu["workers"] = sum(cpu_seconds(worker["pid"], 0.0) for worker in status["workers"])
    return cpu


def commit_runs(broker, group: str, seconds: float, log_dir) -> dict:
    """Rows 5-7: {row: run}."""
    results = {}
    with Members(broker.bootstrap, log_dir) as members:
        member, *many = members.start((group, None), *((f"{group}-x{i}", None) for i in range(CONSUMERS_X4)))
        settled([member], subscribe(member))
        for row, command in (("commit_sync", "commit_sync {start} {seconds}"),
                             ("commit_async", "commit_async {start} {seconds} " + str(ASYNC_WINDOW))):
            cpu_before = cpu_now(broker, [member])
            start = time.monotonic() + 0.05
            member.send(command.format(start=start, seconds=seconds))
            done = member.wait("commits", start, timeout=seconds + 90)
            results[row] = commit_result([done], cpu_before, cpu_now(broker, [member]))
        asked = time.monotonic()
        member.send("committed")
        committed = member.wait("committed", asked)["offset"]
        if committed != done["last_offset"]:
            raise RuntimeError(f"{group}: committed offset {committed}, the last commit was {done['last_offset']}")
        for one in many:
            one.send("subscribe")
        for one in many:
            settled([one], one.wait("subscribe")["t"])
        cpu_before = cpu_now(broker, many)
        start = time.monotonic() + 0.2
        for one in many:
            one.send(f"commit_sync {start} {seconds}")
        done = [one.wait("commits", start, timeout=seconds + 90) for one in many]
        results["commit_sync_x4"] = commit_result(done, cpu_before, cpu_now(broker, many))
        results["commit_sync_x4"]["offsets_partitions"] = sorted(
            partition_for(one.name, 50) for one in many)  # where each group's commits go (of 50)
    return results


def commit_result(done: list, cpu_before: dict, cpu_after: dict) -> dict:
    count = sum(d["count"] for d in done)
    window = max(d["end"] for d in done) - min(d["start"] for d in done)
    result = {"commits": count, "seconds": window, "per_s": count / window,
              "per_consumer_per_s": [d["count"] / (d["end"] - d["start"]) for d in done]}
    for part in cpu_before:  # CPU microseconds per commit: the broker's, its acceptor's and workers', the clients'
        result[f"{part}_cpu_s"] = cpu_after[part] - cpu_before[part]
        result[f"{part}_cpu_us_per_commit"] = result[f"{part}_cpu_s"] / max(1, count) * 1e6
    latencies = [latency for d in done for latency in d.get("latencies_us", ())]
    if latencies:
        result["p50_ms"] = percentile(latencies, 0.50) / 1000
        result["p99_ms"] = percentile(latencies, 0.99) / 1000
    return result


# --- brokers --------------------------------------------------------------------------------


def create_topic(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=30)
    futures[TOPIC].result(60)
    deadline = time.monotonic() + 60
    while True:
        described = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if described and described.error is None and len(described.partitions) == PARTITIONS and \
                all(p.leader >= 0 for p in described.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TOPIC} not ready on {broker.bootstrap}")
        time.sleep(0.05)


def warm_up(broker, name: str, log_dir, commits: bool) -> None:
    """Not measured: __consumer_offsets made and loaded, a group's whole life, the JIT warm."""
    with Members(broker.bootstrap, log_dir) as members:
        first, second = members.start((f"warm-{name}", None), (f"warm-{name}", None))
        settled([first], subscribe(first))
        settled([first, second], subscribe(second))
        if commits:
            start = time.monotonic()
            first.send(f"commit_sync {start} 0.5")
            first.wait("commits", start)
            start = time.monotonic()
            first.send(f"commit_async {start} 0.5 {ASYNC_WINDOW}")
            first.wait("commits", start)


# --- summary --------------------------------------------------------------------------------


def row_summary(row: str, values: dict, kind: str) -> dict:
    """``values``: {broker: [numbers]}; ``kind``: "time" (best = smallest) or "rate"."""
    out = {"row": row, "label": LABELS[row], "kind": kind}
    for broker, numbers in values.items():
        if not numbers:
            continue
        out[broker] = {"median": statistics.median(numbers),
                       "best": min(numbers) if kind == "time" else max(numbers), "runs": numbers}
    if "mpbroker" in out and "kafka" in out:
        out["vs_kafka_median"] = out["mpbroker"]["median"] / out["kafka"]["median"]
        out["vs_kafka_best"] = out["mpbroker"]["best"] / out["kafka"]["best"]
    return out


def fmt_time(value) -> str:
    return f"{value:.3f}" if value is not None else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka", action=argparse.BooleanOptionalAction, default=False,
                        help="every row against Apache Kafka 4.4 too (Maven and Java 17+)")
    parser.add_argument("--repeats", type=int, default=SIZES["repeats"], help="rounds (default 5)")
    parser.add_argument("--commit-seconds", type=float, default=SIZES["commit_seconds"],
                        help="how long each commit run commits (default 3)")
    parser.add_argument("--seed", type=int, default=32, help="of the random phases (default 32)")
    parser.add_argument("--no-crash", dest="crash", action="store_false", help="skip the crash row (tests)")
    parser.add_argument("--dir", default=None, help="where the brokers' files go (default: TMPDIR)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where group_bench.json and .md go")
    args = parser.parse_args(argv)
    if args.kafka and not apache_kafka.available():
        parser.error(f"--kafka: {apache_kafka.missing()}")
    stop_on_signals()
    load_before = os.getloadavg()
    began = time.monotonic()
    runs = {name: {"rebalance": [], "fast": [], "commits": []} for name in ("mpbroker", "kafka")}
    with contextlib.ExitStack() as stack:
        log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="group-bench-", dir=args.dir))
        brokers = {"mpbroker": (stack.enter_context(BenchBroker(args.dir)),
                                stack.enter_context(BenchBroker(args.dir, group_initial_rebalance_delay_ms=0)))}
        if args.kafka:
            kafka_dirs = [stack.enter_context(tempfile.TemporaryDirectory(prefix="apache-kafka-bench-", dir=args.dir))
                          for _ in range(2)]
            brokers["kafka"] = tuple(stack.enter_context(apache_kafka.ApacheKafka(
                directory, group_initial_rebalance_delay_ms=delay, offsets_topic_num_partitions=50))
                for directory, delay in zip(kafka_dirs, (3000, 0)))
            print(f"Apache Kafka {brokers['kafka'][0].version} on {brokers['kafka'][0].bootstrap} "
                  f"(delay 0: {brokers['kafka'][1].bootstrap})", flush=True)
        for name, (default, delay0) in brokers.items():
            for broker in (default, delay0):
                create_topic(broker)
            warm_up(default, f"{name}-default", log_dir, commits=True)
            warm_up(delay0, f"{name}-delay0", log_dir, commits=False)
            print(f"{name}: topic made, warmed up ({time.monotonic() - began:.0f} s)", flush=True)
        order = list(brokers)
        rng = random.Random(args.seed)
        for repeat in range(args.repeats):
            turn = order if repeat % 2 == 0 else order[::-1]
            phases = [rng.random() for _ in range(3)]  # the same for every broker of the round
            for name in turn:
                run = rebalance_run(brokers[name][0], f"rebalance-{name}-{repeat}", log_dir, phases, crash=args.crash)
                run["first_join_protocol"] = run["first_join"] - INITIAL_DELAY_S
                runs[name]["rebalance"].append(run)
                print(f"  round {repeat + 1} {name:8} rebalance: first join {run['first_join']:.3f} s, second join "
                      f"{run['second_join']:.3f} s (told {run['second_join_told']:.3f}), leave {run['leave']:.3f} s "
                      f"(told {run['leave_told']:.3f})"
                      + (f", crash {run['crash']:.3f} s" if args.crash else ""), flush=True)
            for name in turn:
                run = rebalance_run(brokers[name][1], f"fast-{name}-{repeat}", log_dir, phases, crash=False,
                                    config=FAST)
                runs[name]["fast"].append(run)
                print(f"  round {repeat + 1} {name:8} delay 0, heartbeat 100 ms: first join {run['first_join']:.3f} s, "
                      f"second join {run['second_join']:.3f} s, leave {run['leave']:.3f} s", flush=True)
            for name in turn:
                run = commit_runs(brokers[name][0], f"commits-{name}-{repeat}", args.commit_seconds, log_dir)
                runs[name]["commits"].append(run)
                print(f"  round {repeat + 1} {name:8} commits/s: sync {run['commit_sync']['per_s']:,.0f} "
                      f"(p50 {run['commit_sync']['p50_ms']:.2f} ms), async {run['commit_async']['per_s']:,.0f}, "
                      f"x{CONSUMERS_X4} {run['commit_sync_x4']['per_s']:,.0f}", flush=True)
    load_after = os.getloadavg()
    elapsed = time.monotonic() - began

    names = list(brokers)
    rows = []
    for row in REBALANCE_ROWS:
        if row == "crash" and not args.crash:
            continue
        if row in ("first_join_delay0", "second_join_fast", "leave_fast"):
            key = {"first_join_delay0": "first_join", "second_join_fast": "second_join", "leave_fast": "leave"}[row]
            values = {name: [run[key] for run in runs[name]["fast"]] for name in names}
        else:
            values = {name: [run[row] for run in runs[name]["rebalance"]] for name in names}
        rows.append(row_summary(row, values, "time"))
    for row in COMMIT_ROWS:
        summary = row_summary(row, {name: [run[row]["per_s"] for run in runs[name]["commits"]] for name in names},
                              "rate")
        for name in names:
            commits = [run[row] for run in runs[name]["commits"]]
            if "p50_ms" in commits[0]:
                summary[name]["p50_ms"] = statistics.median(run["p50_ms"] for run in commits)
                summary[name]["p99_ms"] = statistics.median(run["p99_ms"] for run in commits)
            for part in ("broker", "acceptor", "workers", "clients"):
                if f"{part}_cpu_us_per_commit" in commits[0]:
                    summary[name][f"{part}_cpu_us_per_commit"] = statistics.median(
                        run[f"{part}_cpu_us_per_commit"] for run in commits)
        rows.append(summary)
    by_row = {row["row"]: row for row in rows}

    with_kafka = "kafka" in names
    rebalance_table = print_table(
        f"Rebalance times of modern consumer groups (confluent-kafka {confluent_kafka.version()}, librdkafka "
        f"{confluent_kafka.libversion()[0]}, a process per member, librdkafka's defaults), seconds, "
        f"{args.repeats} interleaved runs" + ("; mpbroker/Kafka 4.4: mpbroker's median over Kafka's (below 1: "
                                               "mpbroker settles sooner)" if with_kafka else ""),
        ["row", "mpbroker median", "best", *(["Kafka median", "best", "mpbroker/Kafka"] if with_kafka else [])],
        [[row["label"], fmt_time(row["mpbroker"]["median"]), fmt_time(row["mpbroker"]["best"]),
          *([fmt_time(row["kafka"]["median"]), fmt_time(row["kafka"]["best"]), f"{row['vs_kafka_median']:.2f}x"]
            if with_kafka else [])]
         for row in rows if row["kind"] == "time"])
    print()

    def latency(row, name):
        return f"{row[name]['p50_ms']:.2f} / {row[name]['p99_ms']:.2f}" if "p50_ms" in row[name] else "-"

    commit_table = print_table(
        f"Offset commits on one coordinator, commits/s over {args.commit_seconds:g} s runs, {args.repeats} "
        f"interleaved runs; latency of a sync commit p50 / p99 ms and broker CPU us per commit (its whole "
        f"process tree; mpbroker: of which its acceptor), medians of the runs" + ("; mpbroker/Kafka: medians (above 1: mpbroker commits more)" if with_kafka else ""),
        ["row", "mpbroker median", "best", "p50 / p99 ms", "CPU us (acceptor)",
         *(["Kafka median", "best", "p50 / p99 ms", "CPU us", "mpbroker/Kafka"] if with_kafka else [])],
        [[row["label"], f"{row['mpbroker']['median']:,.0f}", f"{row['mpbroker']['best']:,.0f}",
          latency(row, "mpbroker"), f"{row['mpbroker']['broker_cpu_us_per_commit']:.0f} "
                                    f"({row['mpbroker']['acceptor_cpu_us_per_commit']:.0f})",
          *([f"{row['kafka']['median']:,.0f}", f"{row['kafka']['best']:,.0f}", latency(row, "kafka"),
             f"{row['kafka']['broker_cpu_us_per_commit']:.0f}", f"{row['vs_kafka_median']:.2f}x"]
            if with_kafka else [])]
         for row in rows if row["kind"] == "rate"])

    # --- targets
    settle = {row: by_row[row]["mpbroker"]["median"] for row in SETTLE_JUDGED}
    settle_met = all(value < SETTLE_TARGET_S for value in settle.values())
    best_commit_row = max(COMMIT_ROWS, key=lambda row: by_row[row]["mpbroker"]["best"])
    best_commits = by_row[best_commit_row]["mpbroker"]["best"]
    commit_met = best_commits >= COMMIT_TARGET
    crash_note = ""
    if args.crash:
        crash = [run["crash_to_session"] for run in runs["mpbroker"]["rebalance"]]
        crash_note = (f"Crash: the survivor held every partition {by_row['crash']['mpbroker']['median']:.2f} s after "
                      f"the SIGKILL (median; {statistics.median(crash):.2f}x the {CRASH_SESSION_MS / 1000:g} s session "
                      f"timeout, runs {min(crash):.2f}-{max(crash):.2f}x): the session ends 6 s after the dead "
                      f"member's last heartbeat (0-3 s before the kill), and the survivor learns at its next "
                      f"heartbeat after that (0-3 s)."
                      + (f" Kafka: {by_row['crash']['kafka']['median']:.2f} s." if with_kafka else ""))
    told = [by_row[row]["mpbroker"]["median"] for row in ("second_join_told", "leave_told")]
    notes = [
        f"Target, a clean join or leave settled in under {SETTLE_TARGET_S:g} s outside the deliberate delays: "
        f"{'met' if settle_met else 'NOT met'} ("
        + ", ".join(f"{row} {value:.3f} s" for row, value in settle.items()) + ", mpbroker medians). "
        f"Deliberate delays: group.initial.rebalance.delay.ms (3 s, the broker's: a new group's first join waits "
        f"for more members) and, for a join or leave in a Stable group, the incumbent's heartbeat.interval.ms (3 s, "
        f"librdkafka's default: the classic protocol tells a member of a rebalance only in its heartbeat's answer; "
        f"medians until it knew {told[0]:.2f} s and {told[1]:.2f} s here). With librdkafka's defaults a join or "
        f"leave therefore settles in 0-3 s plus the rebalance, on either broker.",
        f"Target, {COMMIT_TARGET:,} commits/s on one coordinator: {'met' if commit_met else 'NOT met'}: best "
        f"{best_commits:,.0f} commits/s ({best_commit_row})"
        + (f"; Kafka's best {max(by_row[row]['kafka']['best'] for row in COMMIT_ROWS):,.0f}" if with_kafka else "")
        + ". mpbroker answers a commit once flushed to disk (standalone); Kafka once appended, unflushed.",
        "CPU per commit, mpbroker (medians): " + "; ".join(
            f"{row} acceptor {by_row[row]['mpbroker']['acceptor_cpu_us_per_commit']:.0f} us, workers "
            f"{by_row[row]['mpbroker']['workers_cpu_us_per_commit']:.0f} us, the clients "
            f"{by_row[row]['mpbroker']['clients_cpu_us_per_commit']:.0f} us" for row in COMMIT_ROWS)
        + f" (the acceptor is one process: at {by_row['commit_async']['mpbroker']['acceptor_cpu_us_per_commit']:.0f} "
        f"us a commit, one core of it answers at most "
        f"{1e6 / max(1, by_row['commit_async']['mpbroker']['acceptor_cpu_us_per_commit']):,.0f} commits/s)."
        + (" Kafka's clients: " + "; ".join(
            f"{row} {by_row[row]['kafka']['clients_cpu_us_per_commit']:.0f} us" for row in COMMIT_ROWS)
           if with_kafka else ""),
    ]
    if crash_note:
        notes.append(crash_note)
    load = (f"Load average (1 min) {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end; the whole "
            f"bench took {elapsed:.0f} s; every broker (two mpbroker, two Kafka with --kafka) up all along on "
            f"{os.cpu_count()} cores.")
    versions = {"confluent_kafka": confluent_kafka.version(), "librdkafka": confluent_kafka.libversion()[0],
                "mpbroker": importlib.metadata.version("mpbroker"), "commit": git_commit(),
                **({"apache_kafka": apache_kafka.DEFAULT_VERSION, "java": java_version()} if with_kafka else {})}
    print("\n" + "\n".join([*notes, load, f"versions: {versions}"]))
    write_results("group_bench", "\n\n".join([rebalance_table, commit_table, *notes, load, f"Versions: {versions}"]), {
        "settings": {"repeats": args.repeats, "seed": args.seed, "commit_seconds": args.commit_seconds, "kafka": with_kafka,
                     "crash": args.crash, "topic_partitions": PARTITIONS, "crash_session_timeout_ms": CRASH_SESSION_MS,
                     "initial_rebalance_delay_ms": int(INITIAL_DELAY_S * 1000), "fast_member_config": FAST,
                     "async_window": ASYNC_WINDOW, "consumers_x4": CONSUMERS_X4,
                     "poll_timeout_s": 0.01, "offsets_topic_num_partitions": 50},
        "versions": versions,
        "targets": {"settle_s": SETTLE_TARGET_S, "settle_rows": SETTLE_JUDGED, "settle_met": settle_met,
                    "commits_per_s": COMMIT_TARGET, "commits_best": best_commits, "commits_best_row": best_commit_row,
                    "commits_met": commit_met},
        "rows": rows, "runs": runs, "elapsed_s": elapsed,
        "load_average": {"start": [round(x, 2) for x in load_before], "end": [round(x, 2) for x in load_after]},
    }, args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
