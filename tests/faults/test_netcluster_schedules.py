"""Random fault schedules against three brokers and ZooKeeper on a private network,
each run checked by the history checker (``tests/faults/netcluster/``: ``schedule``,
``nemesis``, ``workload``, ``checker``, tied together by ``runner``).

CI runs a bounded set: ``MPBROKER_NEMESIS_SCHEDULES`` schedules (default 2, about
30 s each) drawn from a base seed (``MPBROKER_NEMESIS_SEED``, random unless set,
printed before anything runs so a hang can be replayed), and every seed of the
regression list (``netcluster/regressions.py``: each seed's schedule kept as it ran). Each run must settle after its last
heal, acknowledge a durability-2 write in every partition within 30 s of the last heal,
and the checker must find nothing: no durability-2 write lost, no divergent
read or replica, no unexplained duplicate, no order violation, no aborted read; and on
the modern clients' record-batch topic (written and read during the same faults) no
acks=all value lost, no duplicate from an idempotent producer, no reordering by one,
no value away from the offset its ack named, no group commit ahead of the group's
reads or lost.
The long run (100 schedules, reported in the README) is the runner's command.
"""

import os
import random

import pytest

from tests.faults.netcluster.availability import start_network_or_skip
from tests.faults.netcluster.regressions import REGRESSIONS, regression_schedule
from tests.faults.netcluster.runner import PARTITIONS, run_schedule
from tests.faults.netcluster.schedule import make_schedule, schedule_seeds

BASE_SEED = int(os.environ.get("MPBROKER_NEMESIS_SEED") or random.randrange(1 << 31))
COUNT = int(os.environ.get("MPBROKER_NEMESIS_SCHEDULES", "2"))
STEPS = 3


@pytest.fixture
def namespaces():
    """Fails under CI (skips elsewhere) where no network namespaces can be made."""
    with start_network_or_skip():
        pass


def run_and_check(schedule, tmp_path, shim_library, capsys) -> None:
    seed = schedule.seed
    with capsys.disabled():  # first, so that a hang can be replayed
        print(f"\nfault schedule seed {seed} (base seed {BASE_SEED}): "
              f"python -m tests.faults.netcluster.runner --replay {seed}", flush=True)
    result = run_schedule(schedule, str(tmp_path), shim_library)
    print(result.text())
    assert result.ok, result.text()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("number", range(COUNT))
def test_a_random_fault_schedule_loses_no_acknowledged_write(number, namespaces, tmp_path, shim_library, capsys):
    run_and_check(make_schedule(schedule_seeds(BASE_SEED, COUNT)[number], STEPS, PARTITIONS), tmp_path, shim_library,
                  capsys)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", sorted(REGRESSIONS))
def test_a_regression_schedule_stays_fixed(seed, namespaces, tmp_path, shim_library, capsys):
    run_and_check(regression_schedule(seed), tmp_path, shim_library, capsys)
