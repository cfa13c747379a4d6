"""Waiting for a condition in tests: poll a predicate until it holds, or fail saying what
was awaited (and, with ``detail``, e.g. a broker's log)."""

import time


def wait_for(predicate, timeout: float = 10.0, what: str = "condition", detail=None, interval: float = 0.05):
    """Poll ``predicate`` until it returns something true (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)
