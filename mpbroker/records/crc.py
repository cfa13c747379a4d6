"""CRC-32C (Castagnoli), the checksum of a record batch: over everything from the
attributes to the end of the batch.

The ``crc32c`` package computes it in hardware (SSE 4.2 / ARMv8 CRC) where the CPU has
it; ``crc32c(data, value)`` continues a running CRC, so a batch can be checksummed in
pieces without joining them first. Re-exported as is (no Python wrapper on the hot path).
"""

from crc32c import crc32c

__all__ = ["crc32c"]
