"""Schedule seeds that found a defect once, replayed by every CI run.

Each entry: the schedule seed (``schedule.make_schedule(seed)``, three steps, two
partitions: the runner's defaults), what the checker or the harness found with it,
and the fix. ``python -m tests.faults.netcluster.runner --replay <seed>`` runs one.
"""

REGRESSIONS = {
}
