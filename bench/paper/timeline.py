"""What one run of the paper benchmark records: the clock, throughput samples every
``every`` messages (for the paper's "throughput over data sent" figures) and the
summary numbers (messages/s, MB/s of payload).

    timeline = Timeline(every=100_000)
    timeline.start()
    ... if sent >= timeline.next_mark: timeline.mark(sent)
    result = timeline.finish(total, system="rabbitmq", experiment="produce", mode="ff", label=...)
"""

import time

from bench.paper.messages import MESSAGE_BYTES


class Timeline:
    def __init__(self, every: int):
        self.every = max(1, every)
        self.next_mark = self.every
        self.samples = []  # [messages so far, seconds since start]
        self.started = None

    def start(self) -> None:
        self.started = time.perf_counter()
        self.samples = [[0, 0.0]]
        self.next_mark = self.every

    def mark(self, messages: int) -> None:
        """Record that ``messages`` were sent (or received) by now."""
        self.samples.append([messages, time.perf_counter() - self.started])
        while self.next_mark <= messages:
            self.next_mark += self.every

    def finish(self, messages: int, **labels) -> dict:
        """Stop the clock at ``messages`` and return the run's record."""
        seconds = time.perf_counter() - self.started
        if self.samples[-1][0] == messages:
            self.samples[-1][1] = seconds  # the last mark was at the end: the end's time counts
        else:
            self.samples.append([messages, seconds])
        return {
            **labels,
            "messages": messages,
            "seconds": round(seconds, 4),
            "messages_per_s": round(messages / seconds, 1),
            "mb_per_s": round(messages * MESSAGE_BYTES / seconds / 1e6, 2),
            "samples": [[count, round(at, 4)] for count, at in self.samples],
        }


def interval_rates(samples: list) -> list:
    """``[(MB sent at the end of the interval, messages/s in it), ...]`` from samples."""
    points = []
    for (count_before, at_before), (count, at) in zip(samples, samples[1:]):
        if count > count_before and at > at_before:
            points.append((count * MESSAGE_BYTES / 1e6, (count - count_before) / (at - at_before)))
    return points
