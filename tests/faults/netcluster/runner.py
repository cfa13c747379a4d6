"""One fault schedule run end to end, and the command that runs many and reports them.

Owns the sequence of a run: a private network and a fresh cluster (ZooKeeper and three
brokers under the power-cut shim, each broker on a date of its own), a topic of two
partitions (RF 3, ``min.insync.replicas`` 2) and a record-batch topic like it, the
workloads recording into one ``History`` (``workload``: mpbroker's 0.7 clients on the
first; ``modern_workload``: confluent-kafka and kafka-python producers and a committing
consumer group on the second, during the same faults),
the schedule's faults (``nemesis``) after a few quiet seconds, a few more seconds of
load after the last heal (every partition must acknowledge a durability-2 write within
``LIVENESS_S`` of it: a cluster that takes nothing after the faults fails), then the
settle (full ISR, high watermark at the log end), the final reads and
``check(history)``. ``run_schedule`` returns a ``RunResult``; the
history is saved beside the cluster's files so a failed run can be checked again
offline (``History.load``) and the seed replays its schedule.

The command (the issue's long run; CI runs a few schedules through
``tests/faults/test_netcluster_schedules.py``)::

    python -m tests.faults.netcluster.runner --count 100 [--seed S] [--steps 3]
    python -m tests.faults.netcluster.runner --replay <schedule seed>   # a regression's kept schedule, if it is one

prints the base seed first, each run's schedule, applied faults and check table, and
at the end a summary (faults by kind, messages acknowledged and lost by durability,
the modern clients' values acknowledged, lost and duplicated by client and acks,
failed seeds), written to ``bench/results/faults.json`` and ``faults.md``. Needs root
(network namespaces), ZooKeeper and a C compiler, as the fault suite does.
"""

import argparse
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

from tests.faults.power_cut import build_shim
from tests.polling import wait_for

from .checker import check
from .cluster import BROKER_IDS, NetCluster
from .history import History
from .modern_workload import ModernWorkload
from .nemesis import Nemesis
from .network import Network
from .regressions import REGRESSIONS, regression_schedule
from .schedule import make_schedule, schedule_seeds
from .workload import Workload

TOPIC = "nemesis"
MODERN_TOPIC = "nemesis-modern"  # record batches, written and read by modern clients (modern_workload)
PARTITIONS = 2
BEFORE_S = 3.0  # load before the first fault
AFTER_S = 3.0  # load after the last heal
SETTLE_S = 60.0  # the final settle's limit
LIVENESS_S = 30.0  # each partition acknowledges a durability-2 write within this long after the last heal
RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "results")


@dataclass
class RunResult:
    seed: int
    schedule: list  # the schedule's steps, described
    applied: list = field(default_factory=list)  # what the nemesis did, with times
    report: object = None  # the checker's Report (None: the run broke before the check)
    error: str = ""  # the harness's or the settle's failure, if any
    history_path: str = ""
    elapsed_s: float = 0.0
    recovered_s: dict = field(default_factory=dict)  # partition -> first d2 acknowledgement after the last heal
    notes: list = field(default_factory=list)  # what the modern clients reported beyond the history (fatal errors)

    @property
    def ok(self) -> bool:
        return not self.error and self.report is not None and self.report.ok

    def text(self, applied: bool = True) -> str:
        """The run's report (``applied=False``: without the applied steps, printed live)."""
        lines = [f"schedule seed {self.seed} ({self.elapsed_s:.0f} s): {'OK' if self.ok else 'FAILED'}",
                 "  schedule:", *(f"    {line}" for line in self.schedule)]
        if applied:
            lines += ["  applied:", *(f"    {line}" for line in self.applied)]
        if self.report is not None:
            lines += ["  " + line for line in self.report.table().splitlines()]
            if not self.report.ok:
                lines += ["  " + line for line in self.report.details().splitlines()]
        if self.recovered_s:
            lines.append("  first durability-2 acknowledgement after the last heal: " + ", ".join(
                f"partition {partition} {seconds:.2f} s" for partition, seconds in sorted(self.recovered_s.items())))
        lines += [f"  client note: {note}" for note in self.notes]
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.history_path:
            lines.append(f"  history: {self.history_path}")
        lines.append(f"  replay: python -m tests.faults.netcluster.runner --replay {self.seed}")
        return "\n".join(lines)


def run_schedule(schedule, directory: str, shim_library: str, log=None) -> RunResult:
    """Run one schedule on a fresh network and cluster under ``directory``."""
    log = log or (lambda line: None)
    result = RunResult(schedule.seed, schedule.describe())
    started = time.monotonic()
    history = History(seed=schedule.seed, meta={"topic": TOPIC, "schedule": schedule.to_json()})
    try:
        with Network() as network, NetCluster(network, os.path.join(directory, "cluster"),
                                              shim_library=shim_library) as cluster:
            try:
                _run(cluster, network, history, schedule, result, log)
            except Exception as exc:  # noqa: BLE001 - reported with the run, the cluster's logs kept
                result.error = f"{exc!r}\n{traceback.format_exc()}\n{cluster.log_tails(40)}"
    except Exception as exc:  # noqa: BLE001 - the network or the cluster did not start
        result.error = f"{exc!r}\n{traceback.format_exc()}"
    result.history_path = os.path.join(directory, "history.jsonl")
    history.meta["applied"] = result.applied
    history.save(result.history_path)
    result.elapsed_s = time.monotonic() - started
    return result


def _run(cluster, network, history, schedule, result, log) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, len(BROKER_IDS))
    cluster.create_topic(MODERN_TOPIC, PARTITIONS, len(BROKER_IDS), record_batches=True)
    modern = ModernWorkload(cluster, history, MODERN_TOPIC, partitions=PARTITIONS)
    modern.prepare()  # the group's coordinator found while the topics settle
    for topic in (TOPIC, MODERN_TOPIC):
        for partition in range(PARTITIONS):  # nothing before the workload: every payload is in the history
            wait_for(lambda: cluster.leader(topic, partition) is not None, 30, f"a leader of {topic}-{partition}",
                     detail=cluster.log_tails)
            cluster.wait_isr(topic, BROKER_IDS, partition=partition)
    workload = Workload(cluster, history, TOPIC, partitions=PARTITIONS)
    started = time.monotonic()
    with workload, modern:
        time.sleep(BEFORE_S)
        nemesis = Nemesis(cluster, network, history, TOPIC, log)
        result.applied = nemesis.applied  # filled as the steps run, so a failed run shows how far it got
        nemesis.run(schedule, started)
        time.sleep(AFTER_S)
        healed = max((fault.end for fault in history.faults if fault.end is not None), default=started)
        wait_for(lambda: len(_recovered(history, healed)) == PARTITIONS, max(0.0, healed + LIVENESS_S - time.monotonic()),
                 f"a durability-2 acknowledgement of every partition within {LIVENESS_S:.0f} s of the last heal "
                 f"(so far {_recovered(history, healed)})", detail=cluster.log_tails)
        result.recovered_s = _recovered(history, healed)
    assert not workload.errors, f"workload threads failed: {workload.errors}"
    assert not modern.errors, f"modern workload threads failed: {modern.errors}"
    result.notes = modern.notes + [f"{name}: {n} delivery reports after the producers stopped, not recorded"
                                   for name, n in modern.late_reports().items()]
    history.meta["client_logs"] = {name: list(lines) for name, lines in modern.client_logs.items()}
    workload.finish(history, SETTLE_S)
    modern.finish(SETTLE_S)
    result.report = check(history)


def _recovered(history, healed: float) -> dict:
    """Partition -> seconds from ``healed`` to the end of its first durability-2 write
    sent after it and acknowledged."""
    first = {}
    for attempt in history.snapshot_attempts():
        if attempt.durability == 2 and attempt.outcome == "ok" and attempt.start >= healed:
            seconds = round(attempt.end - healed, 2)
            first[attempt.partition] = min(first.get(attempt.partition, seconds), seconds)
    return first


# --- many runs ------------------------------------------------------------------------


def summarize(results: list) -> dict:
    """Totals over runs: faults by kind, payloads acknowledged and lost by durability, and
    the modern clients' values acknowledged, lost and duplicated by client and acks."""
    faults, acknowledged, lost, failures = Counter(), Counter(), Counter(), Counter()
    modern = {}  # client/acks label -> Counter of acknowledged, lost, duplicates
    for result in results:
        if result.report is None:
            continue
        if result.report.modern is not None:
            for label, counts in result.report.modern.by_label().items():
                modern.setdefault(label, Counter()).update(counts)
        faults.update(result.report.faults)
        acknowledged.update(result.report.acknowledged)
        lost.update(result.report.lost)
        failures.update(result.report.failures())
    return {
        "schedules": len(results),
        "ok": sum(result.ok for result in results),
        "failed_seeds": [result.seed for result in results if not result.ok],
        "broken_runs": [result.seed for result in results if result.error],
        "faults": dict(sorted(faults.items())),
        "acknowledged": {f"d{d}": acknowledged[d] for d in (0, 1, 2)},
        "lost": {f"d{d}": lost[d] for d in (0, 1, 2)},
        "failures": dict(failures),
        "modern": {label: {name: counts[name] for name in ("acknowledged", "lost", "duplicates", "resent")}
                   for label, counts in sorted(modern.items())},
        "recovered_s": spread([seconds for result in results for seconds in result.recovered_s.values()]),
        "elapsed_s": round(sum(result.elapsed_s for result in results)),
    }


def spread(values: list) -> dict:
    """Median, p90 and max of ``values``; empty for none."""
    if not values:
        return {}
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "p90": ordered[int(len(ordered) * 0.9)], "max": ordered[-1]}


def summary_table(summary: dict, base_seed=None) -> str:
    lines = ["| schedules | passed | faults applied | acknowledged d0 / d1 / d2 | lost d0 / d1 / d2 |",
             "|---|---|---|---|---|"]
    faults = ", ".join(f"{kind} {n}" for kind, n in summary["faults"].items()) or "none"
    acknowledged = " / ".join(f"{summary['acknowledged'][f'd{d}']:,}" for d in (0, 1, 2))
    lost = " / ".join(f"{summary['lost'][f'd{d}']:,}" for d in (0, 1, 2))
    lines.append(f"| {summary['schedules']} | {summary['ok']} | {faults} | {acknowledged} | {lost} |")
    if summary.get("modern"):
        lines += ["", "| modern client / acks | acknowledged | lost | duplicates (resent after an epoch bump) |",
                  "|---|---|---|---|"]
        lines += [f"| {label} | {row['acknowledged']:,} | {row['lost']:,} | {row['duplicates']:,} "
                  f"({row.get('resent', 0):,}) |" for label, row in summary["modern"].items()]
    recovered = summary.get("recovered_s")
    if recovered:
        lines.append(f"\nfirst durability-2 acknowledgement of a partition after the last heal: median "
                     f"{recovered['median']:.2f} s, p90 {recovered['p90']:.2f} s, max {recovered['max']:.2f} s")
    if base_seed is not None:
        lines.append(f"\nbase seed {base_seed}; failed schedule seeds: {summary['failed_seeds'] or 'none'}"
                     f" (of which the harness broke: {summary['broken_runs'] or 'none'})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10, help="how many schedules (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="the base seed (default: random, printed)")
    parser.add_argument("--replay", type=int, action="append", default=[],
                        help="run this schedule seed (repeatable) instead of --count new ones")
    parser.add_argument("--steps", type=int, default=3, help="faults per schedule (default 3)")
    parser.add_argument("--directory", default=None, help="where the clusters and histories go (default: a temp dir)")
    parser.add_argument("--out", default=RESULTS, help="where faults.json and faults.md go ('' for nowhere)")
    arguments = parser.parse_args(argv)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # the test client's reconnects under faults are expected
    base_seed = arguments.seed if arguments.seed is not None else random.randrange(1 << 31)
    seeds = arguments.replay or schedule_seeds(base_seed, arguments.count)
    print(f"fault schedules: base seed {base_seed}, {len(seeds)} schedules of {arguments.steps} steps", flush=True)
    directory = arguments.directory or tempfile.mkdtemp(prefix="mpbroker-nemesis-")
    shim_library = build_shim(_made(os.path.join(directory, "shim")))
    results = []
    for number, seed in enumerate(seeds, 1):
        schedule = regression_schedule(seed) if seed in REGRESSIONS else make_schedule(seed, arguments.steps, PARTITIONS)
        print(f"\n[{number}/{len(seeds)}] schedule seed {seed}", flush=True)
        result = run_schedule(schedule, _made(os.path.join(directory, f"run-{number}-{seed}")), shim_library,
                              log=lambda line: print(f"    {line}", flush=True))
        results.append(result)
        print(result.text(applied=False), flush=True)
    summary = summarize(results)
    table = summary_table(summary, base_seed)
    print("\n" + table)
    if arguments.out:
        _write_results(arguments, base_seed, seeds, results, summary, table)
    return 0 if summary["ok"] == summary["schedules"] else 1


def _write_results(arguments, base_seed, seeds, results, summary, table) -> None:
    os.makedirs(arguments.out, exist_ok=True)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"
    record = {"command": "python -m tests.faults.netcluster.runner " + " ".join(sys.argv[1:]), "machine": machine,
              "base_seed": base_seed, "steps": arguments.steps, "summary": summary,
              "runs": [{"seed": r.seed, "ok": r.ok, "schedule": r.schedule, "applied": r.applied,
                        "table": r.report.table() if r.report is not None else None,
                        "error": r.error.splitlines()[0] if r.error else ""} for r in results]}
    with open(os.path.join(arguments.out, "faults.json"), "w") as file:
        json.dump(record, file, indent=1)
    with open(os.path.join(arguments.out, "faults.md"), "w") as file:
        file.write(f"# Fault schedules\n\n`{record['command']}` on {machine}\n\n{table}\n")


def _made(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main())
