"""Fault schedules that found a defect once, replayed by every CI run.

Each entry is the schedule as it ran when it found the defect (``Schedule.to_json``'s
steps), kept whole so that a later change to how a seed draws its schedule does not
change what is replayed; the comment says what the checker or the harness found and
the fix. ``python -m tests.faults.netcluster.runner --replay <seed>`` runs one.
"""

from .schedule import Schedule

REGRESSIONS = {
    # The leader of partition 1 killed and restarted: produces that waited on its listening
    # socket while it started were appended the 0.7 way and acknowledged (durability 1 and 2)
    # before its registrar had read its roles; the new leader's epoch cut them away (9
    # durability-2 payloads lost). Fixed in e3cb01e (the acceptor serves no topic with
    # leader epochs on disk until the first roles).
    249103477: {"found": 'lost durability-2 writes', "steps": [
        {"kind": "kill", "role": "leader", "partition": 1, "pick": 5, "direction": "", "hold_s": 3.5, "gap_s": 2.2, "cut_seed": 719351990, "cut_mode": ""},
        {"kind": "split_leader_zookeeper", "role": "leader", "partition": 0, "pick": 3, "direction": "", "hold_s": 0.8, "gap_s": 2.3, "cut_seed": 59044637, "cut_mode": ""},
        {"kind": "cut_zookeeper", "role": "follower", "partition": 0, "pick": 0, "direction": "", "hold_s": 1.6, "gap_s": 1.9, "cut_seed": 927524468, "cut_mode": ""},
    ]},
    # The same with a follower of partition 0 that led partition 1, restarted at once. Fixed
    # in e3cb01e.
    404285457: {"found": 'lost durability-2 writes', "steps": [
        {"kind": "link_down", "role": "leader", "partition": 1, "pick": 2, "direction": "", "hold_s": 5.5, "gap_s": 1.9, "cut_seed": 971095232, "cut_mode": ""},
        {"kind": "isolate", "role": "leader", "partition": 0, "pick": 1, "direction": "", "hold_s": 6.2, "gap_s": 2.9, "cut_seed": 649433340, "cut_mode": ""},
        {"kind": "kill", "role": "follower", "partition": 0, "pick": 4, "direction": "", "hold_s": 0.0, "gap_s": 2.0, "cut_seed": 219696317, "cut_mode": ""},
    ]},
    # The same with the leader power-cut (a random cut, as when it was found): the 0.7-way
    # append landed below the new epoch's start, inside the old epoch, where the other
    # replicas hold other bytes; the final read failed a CRC check in the middle of the log.
    # Fixed in e3cb01e.
    161042648: {"found": 'divergent replica inside an epoch', "steps": [
        {"kind": "split_leader_zookeeper", "role": "leader", "partition": 1, "pick": 0, "direction": "", "hold_s": 5.2, "gap_s": 1.8, "cut_seed": 922734144, "cut_mode": ""},
        {"kind": "power_cut", "role": "leader", "partition": 1, "pick": 1, "direction": "", "hold_s": 0.0, "gap_s": 1.5, "cut_seed": 556873206, "cut_mode": "random"},
        {"kind": "pause_zookeeper", "role": "zookeeper", "partition": 0, "pick": 3, "direction": "", "hold_s": 5.9, "gap_s": 1.7, "cut_seed": 871866614, "cut_mode": ""},
    ]},
}


def regression_schedule(seed: int) -> Schedule:
    """The kept schedule of a regression seed."""
    return Schedule.from_json({"seed": seed, "steps": REGRESSIONS[seed]["steps"]})
