"""Schedule seeds that found a defect once, replayed by every CI run.

Each entry: the schedule seed (``schedule.make_schedule(seed)``, three steps, two
partitions: the runner's defaults), what the checker or the harness found with it,
and the fix. ``python -m tests.faults.netcluster.runner --replay <seed>`` runs one.
"""

REGRESSIONS = {
    # The leader of partition 1 killed and restarted: produces that waited on its
    # listening socket while it started were appended the 0.7 way and acknowledged
    # (durability 1 and 2) before its registrar had read its roles; the new leader's
    # epoch cut them away (9 durability-2 payloads lost). Fixed in e3cb01e (the acceptor
    # serves no partition with leader epochs on disk until the first roles).
    249103477: "lost durability-2 writes: a restarted former leader acknowledged before its roles",
    # The same, with the leader power-cut: the 0.7-way append landed below the new
    # epoch's start, inside the old epoch, where the other replicas hold other bytes;
    # the final read failed a CRC check in the middle of the log. Fixed in e3cb01e.
    161042648: "divergent replica inside an epoch: a power-cut former leader appended before its roles",
}
