"""How fault schedules are drawn from a seed (``tests/faults/netcluster/schedule.py``),
without running them: a pure function of the seed, old kept schedules loading and
describing as before, overlapping pairs that can coexist, clock steps of the sizes and
signs promised. No processes, no network: these run in well under a second.
"""

import json

from tests.faults.netcluster.regressions import REGRESSIONS, regression_schedule
from tests.faults.netcluster.schedule import (
    CLOCK_STEP_S,
    KINDS,
    LEADER_KINDS,
    MIN_OVERLAPPED_HOLD_S,
    ZOOKEEPER_KINDS,
    Schedule,
    Step,
    make_schedule,
    second_kinds,
)

SEEDS = range(400)


def test_a_seed_draws_the_same_schedule_every_time():
    for seed in (0, 7, 249103477):
        assert make_schedule(seed) == make_schedule(seed)
        assert make_schedule(seed).describe() == make_schedule(seed).describe()
    assert len({make_schedule(seed) for seed in range(50)}) == 50


def test_a_schedule_kept_before_overlaps_and_clock_steps_loads_and_replays_as_before():
    old_step = {"kind": "kill", "role": "leader", "partition": 1, "pick": 5, "direction": "", "hold_s": 3.5,
                "gap_s": 2.2, "cut_seed": 719351990, "cut_mode": ""}  # a step as regressions.py keeps it
    step = Step(**old_step)
    assert step.overlap is None and step.offset_s == 0.0 and step.after_s == 0.0
    assert step.describe() == "kill: the leader of partition 1, down 3.5 s, then 2.2 s of quiet"
    for seed in REGRESSIONS:
        schedule = regression_schedule(seed)
        assert all(step.overlap is None and step.offset_s == 0 for step in schedule.steps)
        assert [{key: value for key, value in step.items() if key in old_step}
                for step in schedule.to_json()["steps"]] == REGRESSIONS[seed]["steps"]


def test_an_overlapped_schedule_survives_its_json():
    for seed in range(40):
        schedule = make_schedule(seed, overlap=1.0)
        assert Schedule.from_json(json.loads(json.dumps(schedule.to_json()))) == schedule


def test_overlapping_pairs_are_ones_that_can_coexist():
    pairs = set()
    for seed in SEEDS:
        for step in make_schedule(seed, overlap=1.0).steps:
            second = step.overlap
            if step.hold_s < MIN_OVERLAPPED_HOLD_S:
                assert second is None, "a bounce (or a blip) gets no second fault"
                continue
            assert second is not None, f"seed {seed}: an overlap of 1.0 draws a second fault for {step}"
            pairs.add((step.kind, second.kind))
            assert 0 < second.after_s < step.hold_s, "the second begins while the first holds"
            assert second.overlap is None and second.gap_s == 0.0
            assert second.kind in second_kinds(step.kind)
            assert not (step.kind in ZOOKEEPER_KINDS and second.kind in ZOOKEEPER_KINDS), "one ZooKeeper to fault"
            assert second.kind not in LEADER_KINDS or step.kind in ZOOKEEPER_KINDS
            assert "overlapped" in step.describe() and second.kind.replace("_", " ") in step.describe()
    assert ("isolate", "power_cut") in pairs and ("one_way", "pause_zookeeper") in pairs  # the examples
    assert ("pause_zookeeper", "one_way") in pairs and ("clock_step", "isolate") in pairs
    assert len(pairs) > 80, f"only {len(pairs)} kinds of pairs drawn"


def test_overlaps_come_with_the_default_chance_and_never_with_none():
    steps = [step for seed in SEEDS for step in make_schedule(seed).steps]
    overlapped = sum(step.overlap is not None for step in steps) / len(steps)
    assert 0.2 < overlapped < 0.4, overlapped
    assert all(step.overlap is None for seed in SEEDS for step in make_schedule(seed, overlap=0.0).steps)


def test_clock_steps_go_either_way_by_half_a_minute_to_an_hour():
    steps = [step for seed in SEEDS for step in make_schedule(seed, kinds=("clock_step",)).steps]
    offsets = [step.offset_s for step in steps]
    assert all(CLOCK_STEP_S[0] <= abs(offset) <= CLOCK_STEP_S[1] for offset in offsets)
    assert min(offsets) < -1800 and max(offsets) > 1800 and min(map(abs, offsets)) < 60
    assert {step.role for step in steps} == {"leader", "follower"}
    described = make_schedule(1, kinds=("clock_step",)).steps[0]
    assert f"{abs(described.offset_s):.0f} s {'forward' if described.offset_s > 0 else 'back'}" in described.describe()
    assert "clock_step" in KINDS and not any(kind.startswith("clock_step_") for kind in KINDS)  # no ZooKeeper
