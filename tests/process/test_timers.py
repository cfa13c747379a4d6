"""The child processes' timers (mpbroker.process.timers): repeating and one-shot
timers on a given monotonic time, restarted by a reload, cancelled by an earlier
action in the same round."""

from mpbroker.process.timers import Timers


def test_a_repeating_timer_runs_each_interval_counted_from_when_it_ran():
    timers, ran = Timers(), []
    timers.every(100, ran.append, now_ms=1000)
    assert timers.seconds_until_next(1000) == 0.1
    timers.run(1099)
    assert ran == []
    timers.run(1250)  # late: runs once, due again 100 ms after it ran (no burst)
    assert ran == [1250]
    assert timers.seconds_until_next(1250) == 0.1
    timers.run(1349)
    timers.run(1350)
    assert ran == [1250, 1350]


def test_a_one_shot_timer_runs_once_and_may_schedule_the_next():
    timers, ran = Timers(), []

    def again(now_ms):
        ran.append(now_ms)
        if len(ran) < 3:
            timers.once(50, again, now_ms)

    timers.once(0, again, now_ms=0)
    for now in range(0, 500, 10):
        timers.run(now)
    assert ran == [0, 50, 100]
    assert timers.next_due_ms == float("inf")  # nothing left


def test_restart_counts_the_new_interval_from_now():
    timers, ran = Timers(), []
    timer = timers.every(60_000, ran.append, now_ms=0)
    timers.restart(timer, 10, now_ms=5000)
    assert timers.seconds_until_next(5000) == 0.01
    timers.run(5010)
    assert ran == [5010]


def test_a_timer_cancelled_by_an_earlier_action_in_the_same_round_does_not_run():
    timers, ran = Timers(), []
    second = None

    def first(now_ms):
        ran.append("first")
        timers.cancel(second)

    timers.every(10, first, now_ms=0)
    second = timers.every(10, lambda now_ms: ran.append("second"), now_ms=0)
    timers.run(10)
    assert ran == ["first"]
    timers.run(20)
    assert ran == ["first", "first"]


def test_the_earliest_due_time_is_kept_across_timers():
    timers = Timers()
    timers.every(500, lambda now_ms: None, now_ms=0)
    timers.every(20, lambda now_ms: None, now_ms=0)
    assert timers.next_due_ms == 20
    timers.run(20)
    assert timers.next_due_ms == 40
