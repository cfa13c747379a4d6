"""The message every system gets in the paper benchmark: 200 bytes, as in the paper."""

import os

MESSAGE_BYTES = 200


def make_payload() -> bytes:
    """One 200-byte payload (random bytes: nothing compresses it)."""
    return os.urandom(MESSAGE_BYTES)
