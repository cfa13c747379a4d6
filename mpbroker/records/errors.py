"""The Kafka error codes a record batch can be refused with, and the exception that
carries one.

These are the modern protocol's numbers (Kafka's ``Errors``), not the 0.7 codes of
``mpbroker.codec.errors``: the two numberings overlap (10 is MESSAGE_TOO_LARGE here and
NOT_ENOUGH_REPLICAS there), so ``RecordBatchError`` is deliberately not an
``MPBrokerError``.
"""

CORRUPT_MESSAGE = 2  # bad CRC, bad lengths or varints, truncated, wrong magic, records disagree with the count
MESSAGE_TOO_LARGE = 10  # a batch over the size limit
UNSUPPORTED_COMPRESSION_TYPE = 76  # codec bits 5-7
INVALID_RECORD = 87  # well-formed but refused: offset deltas, count vs lastOffsetDelta, control batches, sequence

ERROR_NAMES = {
    CORRUPT_MESSAGE: "CORRUPT_MESSAGE",
    MESSAGE_TOO_LARGE: "MESSAGE_TOO_LARGE",
    UNSUPPORTED_COMPRESSION_TYPE: "UNSUPPORTED_COMPRESSION_TYPE",
    INVALID_RECORD: "INVALID_RECORD",
}


class RecordBatchError(Exception):
    """A record batch (or a 0.7 message set being converted) that cannot be accepted or read.

    ``code`` is the Kafka error code to answer with, ``message`` says why (and where)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"RecordBatchError({ERROR_NAMES.get(self.code, self.code)}, {self.message!r})"
