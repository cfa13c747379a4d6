"""How long a follower takes to get back into the ISR, read from the broker logs a fault
run kept (``runner --directory D``: ``D/run-*/cluster/b<id>/broker.log``).

Two spans, from the lines the replication code already logs:

- **rejoin**: a worker restarted (a kill or a power cut: a new pid for the same worker
  index of a broker) logs ``following broker L at epoch E`` for a partition, and later
  the leader's registrar writes an ISR that adds this broker at epoch E. Only restarts
  are counted: a follower that was only cut off keeps its old "following" line, so its
  span would be the fault's length, not the rejoin's.
- **apply**: a registrar writes ``ISR [a] -> [b]`` and its broker's worker logs the same
  change: the time the roles took to travel to the worker.

Log lines carry each broker's own date, which a clock-step fault moves: a span below 0
or of ``CLOCK_STEPPED_S`` or more is counted apart, not in the figures.

    python -m tests.faults.netcluster.rejoin_times D
"""

import argparse
import glob
import os
import re
from dataclasses import dataclass, field
from datetime import datetime

from tests.faults.netcluster.runner import spread

CLOCK_STEPPED_S = 60.0
_TIME = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
_FOLLOWING = re.compile(_TIME + r" worker (\d+)\[(\d+)\] INFO mpbroker\.workers\.replication: (\S+): "
                        r"following broker \d+ .* at epoch (\d+)$")
_WRITTEN = re.compile(_TIME + r" registrar\[\d+\] INFO mpbroker\.registrar\.replica_roles: (\S+): "
                      r"ISR \[([\d, ]*)\] -> \[([\d, ]*)\] \(leader epoch (\d+)\)$")
_APPLIED = re.compile(_TIME + r" worker \d+\[\d+\] INFO mpbroker\.workers\.replication: (\S+): "
                      r"ISR \[([\d, ]*)\] -> \[([\d, ]*)\]$")


@dataclass
class Spans:
    rejoin: list = field(default_factory=list)
    apply: list = field(default_factory=list)
    clock_stepped: int = 0

    def add(self, kind: str, seconds: float) -> None:
        if 0 <= seconds < CLOCK_STEPPED_S:
            getattr(self, kind).append(seconds)
        else:
            self.clock_stepped += 1


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _brokers(text: str) -> tuple:
    return tuple(int(b) for b in text.split(",") if b.strip())


def run_spans(cluster_directory: str, spans: Spans, topic_prefix: str = "nemesis") -> None:
    """Adds one run's spans (its ``cluster`` directory) to ``spans``."""
    restarts = []  # (time, broker, partition, epoch)
    written = []  # (time, broker, partition, old ISR, new ISR, epoch)
    applied = []  # (time, broker, partition, old ISR, new ISR)
    for path in glob.glob(os.path.join(cluster_directory, "b*", "broker.log")):
        broker = int(os.path.basename(os.path.dirname(path))[1:])
        pids, seen = {}, set()  # worker index -> pids in order; (pid, partition) already following
        with open(path, errors="replace") as file:
            for line in file:
                line = line.rstrip("\n")
                if match := _FOLLOWING.match(line):
                    stamp, index, pid, partition, epoch = match.groups()
                    known = pids.setdefault(index, [])
                    if pid not in known:
                        known.append(pid)
                    if len(known) > 1 and (pid, partition) not in seen:
                        restarts.append((_seconds(stamp), broker, partition, int(epoch)))
                    seen.add((pid, partition))
                elif match := _WRITTEN.match(line):
                    stamp, partition, old, new, epoch = match.groups()
                    written.append((_seconds(stamp), broker, partition, _brokers(old), _brokers(new), int(epoch)))
                elif match := _APPLIED.match(line):
                    stamp, partition, old, new = match.groups()
                    applied.append((_seconds(stamp), broker, partition, _brokers(old), _brokers(new)))
    for at, leader, partition, old, new, epoch in written:
        if not partition.startswith(topic_prefix):
            continue
        for joined in set(new) - set(old):
            started = [t for t, broker, p, e in restarts if (broker, p, e) == (joined, partition, epoch)]
            if started:
                spans.add("rejoin", at - max(started))
        later = [t for t, broker, p, o, n in applied if (broker, p, o, n) == (leader, partition, old, new)]
        if later:
            spans.add("apply", min(later, key=lambda t: abs(t - at)) - at)


def _spread(values: list) -> str:
    found = spread(values)
    if not found:
        return "none"
    return f"median {found['median']:.2f} s, p90 {found['p90']:.2f} s, max {found['max']:.2f} s ({len(values)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="a runner --directory")
    arguments = parser.parse_args(argv)
    spans = Spans()
    runs = sorted(glob.glob(os.path.join(arguments.directory, "run-*", "cluster")))
    for cluster_directory in runs:
        run_spans(cluster_directory, spans)
    print(f"{len(runs)} runs")
    print(f"restarted follower following -> ISR written with it: {_spread(spans.rejoin)}")
    print(f"ISR written by the registrar -> applied by its worker: {_spread(spans.apply)}")
    print(f"spans across a clock step, left out: {spans.clock_stepped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
