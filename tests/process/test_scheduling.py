"""The broker's CPU scheduling policy (mpbroker.process.scheduling), on a real broker:
with ``sched.batch`` (the default) every thread of every process of it (the
supervisor, the acceptor, the workers and their flusher threads) runs under
SCHED_BATCH, and the status says so; with ``sched.batch=false`` they keep the policy
the broker was started with."""

import os

import pytest

from mpbroker.testing.process_cpu import process_tree

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH on this system")


def broker_threads(supervisor_pid: int) -> dict:
    """``{thread id: (process name, policy)}`` of the supervisor and its children."""
    threads = {}
    for pid in process_tree(supervisor_pid):
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
        for tid in os.listdir(f"/proc/{pid}/task"):
            threads[int(tid)] = (name, os.sched_getscheduler(int(tid)))
    return threads


def test_every_thread_of_the_broker_runs_under_sched_batch(broker):
    threads = broker_threads(broker.process.pid)
    names = {name for name, _ in threads.values()}
    assert {"mpbroker-acc", "mpbroker-w0"} <= names and len(threads) > len(names)  # workers have flusher threads
    assert {tid: policy for tid, (_, policy) in threads.items() if policy != os.SCHED_BATCH} == {}
    assert broker.status()["scheduling"] == "batch"
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the test itself is not


def test_with_sched_batch_false_the_policy_started_with_stays(broker_factory):
    broker = broker_factory(sched_batch="false")
    threads = broker_threads(broker.process.pid)
    assert threads and {policy for _, policy in threads.values()} == {os.sched_getscheduler(0)}
    assert broker.status()["scheduling"] == "other"
