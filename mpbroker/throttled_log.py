"""Log lines for events that repeat (connections reset by their clients, refused
connections, a partition's appends failing while the disk is full, a flush waiting for
a file descriptor) without flooding the log.

Each kind of event is logged at once the first time; later ones within the interval
are only counted, and the next line says how many there were. ``flush`` (an event
loop's timer calls it) writes that line once the interval has passed, so the count of
a burst does not wait for the next event, and forgets kinds that stayed quiet for a
whole interval. ``ended`` says that a kind of failure is over (the first success after
it) and how many there were. Why not a line per event: a client that opens and resets
thousands of connections a second, or a full disk under thousands of produces a second,
would write thousands of lines a second (4000 in 2.2 s, measured), drowning the lines
that matter.
"""

import logging
import time

REPEAT_INTERVAL_S = 10.0


class ThrottledLog:
    def __init__(self, logger: logging.Logger, interval_s: float = REPEAT_INTERVAL_S, clock=time.monotonic):
        self._log = logger
        self._interval_s = interval_s
        self._clock = clock
        # kind -> [level, time of the last line, events not logged since, the last of them, events in all]
        self.active = {}

    def event(self, kind, level: int, message: str) -> None:
        """One event of ``kind``: logged now, or counted for a later line."""
        now = self._clock()
        entry = self.active.get(kind)
        if entry is None:
            self.active[kind] = [level, now, 0, None, 1]
            self._log.log(level, "%s", message)
            return
        entry[4] += 1
        if now - entry[1] >= self._interval_s:
            self._write(entry, now, message, entry[2])
        else:
            entry[2] += 1
            entry[3] = message

    def ended(self, kind, message: str) -> None:
        """``kind`` of failure is over: say so with how many there were (a dict test on
        a hot path first: ``if throttled.active``)."""
        entry = self.active.pop(kind, None)
        if entry is not None:
            self._log.warning("%s works again after %d failures", message, entry[4])

    def flush(self) -> None:
        """Write the counted events of every kind whose interval has passed; forget the
        kinds that had no event for a whole interval."""
        now = self._clock()
        for kind, entry in list(self.active.items()):
            if now - entry[1] < self._interval_s:
                continue
            if entry[2]:
                self._write(entry, now, entry[3], entry[2] - 1)
            else:
                del self.active[kind]

    def _write(self, entry: list, now: float, message: str, others: int) -> None:
        """``message``, with the count of the ``others`` not logged since the last line."""
        if others:
            self._log.log(entry[0], "%s (and %d more like it in the last %.0f s)", message, others, now - entry[1])
        else:
            self._log.log(entry[0], "%s", message)
        entry[1] = now
        entry[2] = 0
        entry[3] = None
