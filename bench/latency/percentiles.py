"""Latency summaries: the steady part of a stream (warm-up and cool-down left out) and
percentiles (nearest rank) of a list of durations."""

import math


def percentile(sorted_values: list, fraction: float):
    """The value at ``fraction`` (0..1) of ``sorted_values``, by nearest rank."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def summary_ms(latencies_ns: list) -> dict:
    values = sorted(latencies_ns)
    to_ms = lambda ns: round(ns / 1e6, 3)  # noqa: E731
    return {
        "count": len(values),
        "p50_ms": to_ms(percentile(values, 0.50)),
        "p99_ms": to_ms(percentile(values, 0.99)),
        "p99_9_ms": to_ms(percentile(values, 0.999)),
        "max_ms": to_ms(values[-1]),
        "mean_ms": to_ms(sum(values) / len(values)),
    }


def steady_latencies(stamps: list, warmup_s: float, cooldown_s: float) -> list:
    """The latencies (ns) of the messages sent after the first ``warmup_s`` and before
    the last ``cooldown_s`` seconds of ``stamps`` (``[(sent at, received at), ...]`` in ns,
    in the order sent)."""
    if not stamps:
        return []
    first, last = stamps[0][0] + int(warmup_s * 1e9), stamps[-1][0] - int(cooldown_s * 1e9)
    return [received - sent for sent, received in stamps if first <= sent <= last]
