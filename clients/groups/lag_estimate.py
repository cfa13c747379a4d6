"""How many messages a group's lag holds, from a sample of the lagging bytes.

Offsets are byte positions, so a lag is known in bytes only. Counting its messages
would mean reading all of it; instead one fetch is made at the committed offset (up
to ``SAMPLE_BYTES``, more only if not one whole message came back). If that fetch
reached the log end, the count is exact; otherwise the lag is scaled by the sample's
bytes per message: ``round(lag * messages / bytes)``, an estimate that is as good as
the sample is typical of the rest (messages of one size: exact; a mix: roughly).
Messages inside compressed wrappers count one each, as a consumer receives them; so do
the records of a partition that modern producers wrote (record batches).
"""

from typing import NamedTuple

SAMPLE_BYTES = 64 * 1024
MAX_SAMPLE_BYTES = 1024 * 1024


class LagMessages(NamedTuple):
    messages: int | None  # None: no whole message in MAX_SAMPLE_BYTES
    exact: bool  # the sample covered the whole lag


def scale(lag_bytes: int, sample_messages: int, sample_bytes: int) -> int:
    """Messages in ``lag_bytes`` at the sample's bytes per message (at least 1 if any lag)."""
    if lag_bytes <= 0:
        return 0
    return max(1, round(lag_bytes * sample_messages / sample_bytes))


def lag_messages(consumer, topic: str, partition: int, committed: int, log_end: int) -> LagMessages:
    """The messages between ``committed`` and ``log_end`` (``consumer``: a SimpleConsumer
    of the partition's broker; its errors pass through: OffsetOutOfRangeError for a
    committed offset outside the log, NotAMessageBoundaryError for one inside a message)."""
    lag = log_end - committed
    if lag <= 0:
        return LagMessages(0, True)
    size = min(lag, SAMPLE_BYTES)
    limit = min(lag, MAX_SAMPLE_BYTES)
    while True:
        sample = consumer.fetch(topic, partition, committed, size)
        if sample.payloads:
            break
        if sample.record_batches:  # the answer starts at the batch holding ``committed``: maybe before it
            limit = MAX_SAMPLE_BYTES
        if size >= limit or sample.size < size:
            return LagMessages(None, False)
        size = min(limit, size * 16)
    covered = sample.next_offset - committed  # a record-batch answer may start before ``committed``
    if covered >= lag:
        return LagMessages(len(sample.payloads), True)
    return LagMessages(scale(lag, len(sample.payloads), max(1, covered)), False)
