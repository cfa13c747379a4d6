"""The arithmetic of ``bench.kafka_latency``'s producer and window, without a broker (the
quick run of ``test_kafka_compare`` drives the processes against both brokers): the
producer's pacing sends a steady rate and never a burst of more than one late tick; the
warm-up and cool-down are cut by the send stamps."""

from bench.kafka_latency_member import Pacing
from bench.latency.percentiles import steady_latencies, summary_ms


def test_pacing_on_time_sends_the_rate_a_tick_at_a_time():
    pacing = Pacing(rate=10_000, seconds=1.0, tick_s=0.001)
    sent = [pacing.due((tick + 0.01) / 1000) for tick in range(1, 1001)]  # just after each tick
    assert set(sent) == {10} and sum(sent) == 10_000
    assert pacing.done and pacing.skipped == 0 and pacing.due(2.0) == 0


def test_pacing_late_sends_one_tick_of_backlog_and_skips_the_rest():
    pacing = Pacing(rate=10_000, seconds=1.0, tick_s=0.001)
    assert pacing.due(0.001) == 10
    assert pacing.due(0.0025) == 15  # a bit late: all of it (within one tick's catch-up)
    assert pacing.due(0.053) == 20  # held up 50 ms: this tick and one more, not 505 at once
    assert pacing.skipped == 485
    assert pacing.due(0.054) == 10  # on schedule again, the skipped ones not owed any more
    assert pacing.due(5.0) == 20 and pacing.done
    assert pacing.accounted == 10_000 and pacing.skipped == 485 + (10_000 - 540 - 20)


def test_pacing_at_a_low_rate_sends_single_messages():
    pacing = Pacing(rate=1_000, seconds=0.01, tick_s=0.001)
    assert [pacing.due(t / 10_000) for t in (5, 10, 15, 20, 25, 30)] == [0, 1, 0, 1, 0, 1]
    assert pacing.due(0.02) == 2 and pacing.done and pacing.skipped == 5


def test_steady_window_leaves_out_warmup_and_cooldown_by_send_time():
    second = 1_000_000_000
    stamps = [(t * second // 10, t * second // 10 + latency) for t, latency in enumerate(range(1, 41))]  # 4 s
    kept = steady_latencies(stamps, warmup_s=1.0, cooldown_s=0.5)
    assert kept == list(range(11, 36))  # sent from 1.0 s to 3.4 s (the last, 3.9 s, less 0.5)
    assert summary_ms([1_000_000, 2_000_000, 3_000_000])["p50_ms"] == 2.0
