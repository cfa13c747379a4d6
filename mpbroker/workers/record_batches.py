"""Modern produces in a worker: a produce's record batches checked before anything is
written, and the offsets written into them as they are appended.

Every batch is validated in full (``records.validate_batches``: lengths, CRC-32C,
magic, codec, the records walked, offset deltas 0..n-1, at most ``max.message.size``
bytes each, compressed ones inflated within ``max.inflated.request.bytes``). Then
each batch gets its offsets from the byte position it is appended at: stored at
[p, q) with n records, its baseOffset is q - n (ARCHITECTURE.md, "Modern offsets"). A
compressed batch with more records than bytes could not have offsets that way, so it
is stored uncompressed instead (``reencode_uncompressed``; rare: records of under a
byte each after compression). With ``message.timestamp.type=LogAppendTime`` each
batch takes the append time (and a new CRC). On a replicated partition each batch's
partitionLeaderEpoch becomes the leader epoch it is appended under (outside the CRC), as
Kafka's leader writes it. Otherwise the bytes are written as they came.

Idempotent producers (a producer id in the batch): a batch that repeats one of the
producer's last five is not written again and is answered with its original offsets;
a gap in the sequence or a fenced epoch is refused (``producer_state``).
"""

from mpbroker.records.batch import reencode_uncompressed, stamp_batch, validate_batches
from mpbroker.workers.producer_state import ProducerStates, Verdict


def checked(data: bytes, config, max_batch_bytes: int | None = None) -> tuple:
    """``(data, batches)``: the produce's bytes to append (re-encoded where a batch's
    records outnumber its bytes) and their ``BatchInfo``; raises RecordBatchError.
    ``max_batch_bytes``: the topic's ``max.message.bytes`` (default: the broker's)."""
    batches = validate_batches(data, max_batch_bytes=config.max_message_size if max_batch_bytes is None
                               else max_batch_bytes,
                               inflate_limit=config.max_inflated_request_bytes)
    if all(batch.offsets_fit for batch in batches):
        return data, batches
    data = b"".join(bytes(data[batch.start:batch.end]) if batch.offsets_fit
                    else reencode_uncompressed(data[batch.start:batch.end]) for batch in batches)
    return data, validate_batches(data, max_batch_bytes=1 << 62, deep=False)


def stamped(data: bytes, batches, position: int, log_append_time_ms, leader_epoch=None) -> tuple:
    """``(bytes to append at log position ``position``, the first record's offset)``;
    ``leader_epoch``: the partitionLeaderEpoch to write (a replicated partition's leader
    epoch), None to leave the producer's. A bytearray (the produce's own copy out of the
    ring) is stamped in place; anything else is copied first."""
    buffer = data if isinstance(data, bytearray) else bytearray(data)
    for batch in batches:
        stamp_batch(buffer, batch.start, position + batch.end - batch.records, log_append_time_ms=log_append_time_ms,
                    leader_epoch=leader_epoch)
    first = position + batches[0].end - batches[0].records if batches else position
    return buffer, first


class IdempotentProducers:
    """The idempotent producers' state (``producer_state.ProducerStates``) of each
    record-batch log this worker appends to: built from the log at its first produce,
    and again whenever the log's end moved by other means than this worker's appends
    (a follower copying its leader, a truncation): a leader then starts from what its
    log holds, as Kafka rebuilds it from the log."""

    def __init__(self):
        self._states = {}  # Log -> (ProducerStates, the log end it describes)

    def begin(self, partition_log):
        """A layer of judgements over the log's state, committed once appended."""
        states, end = self._states.get(partition_log, (None, -1))
        if states is None or end != partition_log.log_end:
            states = ProducerStates.from_log(partition_log)
            self._states[partition_log] = (states, partition_log.log_end)
        return states.begin()

    def appended(self, partition_log, layer) -> None:
        states, _ = self._states[partition_log]
        layer.commit()
        self._states[partition_log] = (states, partition_log.log_end)

    def forget(self, partition_log) -> None:
        self._states.pop(partition_log, None)


def judged(layer, produce, position: int) -> Verdict:
    """The verdict on ``produce``'s batches appended at ``position`` (APPEND, DUPLICATE,
    or a refusal with its Kafka code)."""
    return layer.check_produce(produce.batches, position)
