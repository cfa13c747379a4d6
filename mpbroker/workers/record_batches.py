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
"""

from mpbroker.records.batch import reencode_uncompressed, stamp_batch, validate_batches


def checked(data: bytes, config) -> tuple:
    """``(data, batches)``: the produce's bytes to append (re-encoded where a batch's
    records outnumber its bytes) and their ``BatchInfo``; raises RecordBatchError."""
    batches = validate_batches(data, max_batch_bytes=config.max_message_size,
                               inflate_limit=config.max_inflated_request_bytes)
    if all(batch.offsets_fit for batch in batches):
        return data, batches
    data = b"".join(bytes(data[batch.start:batch.end]) if batch.offsets_fit
                    else reencode_uncompressed(data[batch.start:batch.end]) for batch in batches)
    return data, validate_batches(data, max_batch_bytes=1 << 62, deep=False)


def stamped(data: bytes, batches, position: int, log_append_time_ms, leader_epoch=None) -> tuple:
    """``(bytes to append at log position ``position``, the first record's offset)``;
    ``leader_epoch``: the partitionLeaderEpoch to write (a replicated partition's leader
    epoch), None to leave the producer's."""
    buffer = bytearray(data)
    for batch in batches:
        stamp_batch(buffer, batch.start, position + batch.end - batch.records, log_append_time_ms=log_append_time_ms,
                    leader_epoch=leader_epoch)
    first = position + batches[0].end - batches[0].records if batches else position
    return buffer, first
