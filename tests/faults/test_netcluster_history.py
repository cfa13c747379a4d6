"""A recorded run under a network fault, checked by the history checker.

The workload (tests/faults/netcluster/workload.py: producers with durability 2, 1 and
0, consumers of the current leaders) runs against a topic of two partitions (RF 3,
min.insync.replicas 2) while the leader of partition 0 is isolated for longer than
the ZooKeeper session; after the heal it runs on, then the final reads and replica
logs are taken and ``check(history)`` must find nothing: no durability-2 write lost,
no divergent read or replica, no unexplained duplicate, no order violation, no
aborted read. The history is saved in the test's tmp dir for an offline look.
"""

import time

from tests.faults.netcluster.checker import check
from tests.faults.netcluster.cluster import BROKER_IDS, SESSION_MS
from tests.faults.netcluster.history import History
from tests.faults.netcluster.workload import Workload
from tests.polling import wait_for

TOPIC = "hist"
BEFORE_S = 5.0
ISOLATED_S = 6.0  # past the 4 s session: the leader is replaced
AFTER_S = 3.0


def test_isolating_a_leader_under_load_loses_no_acknowledged_write(netcluster, network, tmp_path):
    cluster = netcluster
    cluster.create_topic(TOPIC, 2, 3)
    for partition in (0, 1):  # nothing produced before the workload: every payload is in the history
        wait_for(lambda: cluster.leader(TOPIC, partition) is not None, 30, f"a leader of {TOPIC}-{partition}",
                 detail=cluster.log_tails)
        cluster.wait_isr(TOPIC, BROKER_IDS, partition=partition)
    history = History(seed=None, meta={"topic": TOPIC, "schedule": "isolate the leader of partition 0"})
    schedule = []
    workload = Workload(cluster, history, TOPIC, partitions=2)
    started = time.monotonic()
    with workload:
        time.sleep(BEFORE_S)
        leader = cluster.leader(TOPIC, 0)
        assert leader is not None, f"no leader of {TOPIC}-0 to isolate\n{cluster.log_tails()}"
        fault = history.begin_fault("isolate", leader)
        schedule.append(f"{time.monotonic() - started:.1f}s isolate broker {leader} (leader of {TOPIC}-0)")
        network.isolate(cluster.broker_node(leader))
        time.sleep(ISOLATED_S)
        network.heal()
        history.end_fault(fault)
        schedule.append(f"{time.monotonic() - started:.1f}s heal (new leader of {TOPIC}-0: "
                        f"{cluster.leader(TOPIC, 0)}, session {SESSION_MS} ms)")
        time.sleep(AFTER_S)
    schedule.append(f"{time.monotonic() - started:.1f}s workload stopped")
    workload.finish(history)
    history.meta["schedule"] = schedule
    path = tmp_path / "history.jsonl"
    history.save(path)
    report = check(history)
    print("\nschedule:\n  " + "\n  ".join(schedule))
    print(f"history saved to {path}")
    print(report.table())
    assert not workload.errors, workload.errors
    assert report.ok, f"{report.details()}\nhistory: {path}\n{cluster.log_tails(60)}"
