"""Which client connections the acceptor refuses or closes, apart from bad requests:

- ``AddressCounts``: open connections per client address, for
  ``max.connections.per.ip`` (one address must not take every ``max.connections`` slot);
- ``overdue``: the sweep for connections past a deadline. Idle: no byte moved either way,
  and no answer was queued for output, for ``connections.max.idle.ms`` (an answer that
  waited for a worker and finds the socket without room is not idle since its request),
  unless the broker keeps the client waiting (an answer owed by a worker, or ready and
  not yet sent: the sweep can run in the round of events that made it ready; a full
  worker queue). Slow: a request whose first byte arrived
  more than ``request.receive.timeout.ms`` ago is still not complete (a client that
  sends a byte now and then would never be idle), unless the broker is not reading the
  connection (paused or throttled: that time is the broker's, and the clock starts
  again when it reads on).

Kept out of the event loop so the loop stays a loop: the hot path only stores times
(``Connection.last_active``, ``FrameReader.frame_started``); everything here runs once
per accept, close or sweep.
"""

SWEEP_INTERVAL_MAX_S = 1.0
SWEEP_INTERVAL_MIN_S = 0.01
SWEEPS_PER_TIMEOUT = 4  # a deadline is noticed within a quarter of its length (or a second)


def address_of(peer) -> str:
    """The client address of an ``accept()`` peer (IPv4 or IPv6 tuple; a unix socket's name)."""
    return peer[0] if isinstance(peer, tuple) else str(peer)


class AddressCounts:
    """Open connections per client address."""

    def __init__(self):
        self._open = {}  # address -> connections open from it

    def admit(self, address: str, limit: int) -> bool:
        """Count one more connection from ``address``, or False if it has ``limit`` already."""
        count = self._open.get(address, 0)
        if count >= limit:
            return False
        self._open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self._open.get(address, 0)
        if count > 1:
            self._open[address] = count - 1
        else:
            self._open.pop(address, None)

    def open_from(self, address: str) -> int:
        return self._open.get(address, 0)


def sweep_interval(idle_ms: int, receive_timeout_ms: int) -> float:
    """Seconds until the next sweep: a quarter of the shorter timeout, within bounds."""
    shortest_ms = min(idle_ms, receive_timeout_ms) if idle_ms else receive_timeout_ms
    return min(SWEEP_INTERVAL_MAX_S, max(SWEEP_INTERVAL_MIN_S, shortest_ms / 1000 / SWEEPS_PER_TIMEOUT))


def overdue(connections, now: float, idle_ms: int, receive_timeout_ms: int):
    """``(idle, slow)``: the connections of ``connections`` past either deadline (see
    above; ``idle_ms`` 0 means never idle)."""
    idle_cutoff = now - idle_ms / 1000 if idle_ms else float("-inf")
    frame_cutoff = now - receive_timeout_ms / 1000
    idle, slow = [], []
    for connection in connections:
        if connection.last_active < idle_cutoff and not connection.owed_answer:
            idle.append(connection)
            continue
        reader = connection.reader
        if (reader.frame_started < frame_cutoff and reader.buffered
                and not (connection.paused or connection.throttled or connection.closing)):
            slow.append(connection)
    return idle, slow
