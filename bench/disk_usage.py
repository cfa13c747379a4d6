"""Bytes a directory tree takes on disk: allocated blocks (``du``), so files a broker
preallocates sparsely count for what they hold, not for their length."""

import os


def allocated_bytes(path: str, suffix: str = "") -> int:
    """Allocated bytes of the files under ``path`` (only names ending in ``suffix``)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            if name.endswith(suffix):
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except FileNotFoundError:  # removed meanwhile (a rolled or compacted file)
                    pass
    return total
