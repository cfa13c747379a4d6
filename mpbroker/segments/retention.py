"""Which old segments retention deletes. Pure decisions; the Log carries them out.

Whole segments go, oldest first: those last modified more than ``retention_ms`` ago,
then, while the log is larger than ``retention_bytes``, more from the front. The
segment being written (the last one) is never chosen here; when every segment has
expired the Log first rolls a new, empty active segment so that one always remains.
"""


def expired_by_age(mtimes_ms, now_ms: int, retention_ms: int) -> int:
    """How many leading segments were last modified over ``retention_ms`` ago."""
    count = 0
    for mtime in mtimes_ms:
        if now_ms - mtime <= retention_ms:
            break
        count += 1
    return count


def excess_by_size(sizes, retention_bytes: int) -> int:
    """How many leading segments to drop so the log is at most ``retention_bytes``,
    never counting the last (active) segment."""
    if retention_bytes < 0:
        return 0
    total = sum(sizes)
    count = 0
    for size in sizes[:-1]:
        if total <= retention_bytes:
            break
        total -= size
        count += 1
    return count
