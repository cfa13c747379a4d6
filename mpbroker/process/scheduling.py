"""The CPU scheduling policy the broker's processes run under: Linux's SCHED_BATCH
(sched(7)) with ``sched.batch=true``, the default.

Under the default policy a process that a wake-up makes runnable preempts the task
running on its CPU when the scheduler owes it time. The broker hands every request
from process to process (the acceptor to a worker through a ring, the bytes to a
follower over a socket, the acknowledgement back), so on a machine with fewer cores
than busy broker processes each hand-off also throws the sender off its CPU, and
comes back as two more context switches. Under SCHED_BATCH a woken process takes its
turn instead; nothing else changes (the same nice level, the same share of the CPU,
no privilege needed). Measured on the 2-core development VM, 300,000 messages per run
(ARCHITECTURE.md has the figures): a replicated produce (RF 3, durability 2) switched
~7,000 times instead of ~12,500 and ran ~25% faster; the acknowledged round trip,
the ingest and the end-to-end latency did not get worse.

Set once, in the supervisor before it forks a child or starts a thread: every process
and thread of the broker inherits it, so ``sched.batch`` changes with a restart.
``false`` leaves the policy the broker was started with (a systemd unit's
``CPUSchedulingPolicy=``, say). Where there is no SCHED_BATCH, or the system refuses
it, the broker runs as it was started and logs why.
"""

import logging
import os

log = logging.getLogger("mpbroker.supervisor")


def apply(batch: bool) -> str:
    """Put the calling thread, and what it forks and starts from now on, under
    SCHED_BATCH when ``batch``; the name of the policy in force afterwards."""
    if batch:
        if not hasattr(os, "SCHED_BATCH"):
            log.warning("sched.batch: this system has no SCHED_BATCH; running under its default policy")
        else:
            try:
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            except OSError as exc:
                log.warning("sched.batch: cannot run under SCHED_BATCH (%s); keeping the policy started with",
                            exc.strerror or exc)
    return policy_name(0)


def policy_name(pid: int) -> str:
    """``"batch"``, ``"other"``, ... for the thread or process ``pid`` (0: the caller)."""
    if not hasattr(os, "sched_getscheduler"):
        return "unknown"
    policy = os.sched_getscheduler(pid)
    names = {getattr(os, name): name[len("SCHED_"):].lower()
             for name in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
             if hasattr(os, name)}
    return names.get(policy, str(policy))
