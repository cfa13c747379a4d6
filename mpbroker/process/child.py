"""The skeleton every child of the supervisor runs on: the acceptor, the partition
workers, the registrar and the metrics exporter are subclasses of ``ChildProcess``.

What it gives each of them, the same way:
- **Signals.** TERM asks for a graceful stop (``begin_stop``), delivered through a
  wake-up fd the event loop watches, so no handler runs in the middle of the loop's
  work; INT and QUIT exit at once (the supervisor's fast stop); HUP and PIPE are
  ignored (the supervisor hands reloads out itself; a closed socket shows as EPIPE).
- **The control channel** from the supervisor (``ipc.control``): ``stop`` and a channel
  that closed (the supervisor is gone; ``die_with_parent`` kills us too) begin the
  stop; ``reload`` calls ``reload``; any other message goes to the handler the
  subclass names for it in ``control_handlers``.
- **The heartbeat** in the shared slot table every HEARTBEAT_MS, which the supervisor
  reads to kill a child that hangs; and **timers** (``timers``), all on the monotonic
  clock.
- **The event loop**: one selector; each registration's data is the callable that
  handles it (``watch``), called with the event mask. ``ready`` goes to the
  supervisor once ``start`` has opened what the child serves.
- **Busy polling** (``busy_poll_s``: the acceptor's and the workers' ``busy.poll.us``,
  200 us by default, 0 turns it off): after an event the loop may poll without
  sleeping, yielding the CPU between polls, for a window that adapts to the gaps
  between its events (``PollWindow``). An acknowledged request crosses from the
  acceptor to a worker and back; a process asleep in ``epoll_wait`` must be woken each
  time, and on a virtual machine the sleep and the wake-up (a context switch, an
  interrupt to another CPU) cost more than the Python that handles the request. A
  process still polling takes the next event without them: a one-message
  acknowledged round trip here goes from ~200 to ~80 us, for less CPU per round trip.
  An idle process, or one whose events come further apart than the ceiling, does not
  poll. The price is CPU where events keep coming just within the ceiling while other
  processes want the CPU: up to one CPU per polling process (Seastar's
  ``--idle-poll-time-us`` makes the same trade, at the same 200 us).

A subclass fills in ``start`` (open, register its fds and timers; an exit code ends
the process before it is ready), and where it needs to ``after_events`` (work after
each round of events), ``poll_timeout`` (a shorter sleep while work waits),
``begin_stop``/``finished`` (a stop that drains before the loop ends), ``finish``
(what the stop does after the loop; returns the exit code) and ``dispatch`` (a hot
loop that tells its most frequent events apart itself).
"""

import logging
import os
import selectors
import signal
from os import sched_yield
from time import monotonic

from mpbroker.clock import monotonic_ms
from mpbroker.ipc.control import ControlChannel, Op
from mpbroker.logging_setup import set_level
from mpbroker.process.timers import Timers

log = logging.getLogger(__name__)

HEARTBEAT_MS = 500


class ChildProcess:
    def __init__(self, slots, slot: int, control: ControlChannel):
        self.slots = slots  # the shared SlotTable (heartbeats)
        self.slot = slot  # this process's row in it
        self.control = control
        self.timers = Timers()
        self.selector = None
        self.stopping = False
        self.exit_code = 0
        self._wakeup_fd = -1
        self._handlers = {}
        self.busy_poll_s = 0.0  # poll without sleeping this long after the last event (see above)

    # --- for subclasses ---------------------------------------------------------

    def start(self):
        """Open what the process serves and ``watch`` its fds; None when ready to serve,
        else the exit code to end with (``ready`` is not sent)."""
        return None

    def ready_fields(self) -> dict:
        """Fields of the ``ready`` message."""
        return {}

    def control_handlers(self) -> dict:
        """``Op -> callable(message)`` for the control messages beyond stop and reload."""
        return {}

    def reload(self, properties: dict) -> None:
        """The settings now in force (``properties``, every key); by default the log level."""
        set_level(properties["log.level"])

    def begin_stop(self) -> None:
        self.stopping = True

    def finished(self) -> bool:
        return self.stopping

    def poll_timeout(self):
        """A cap on the next sleep, in seconds (None: the timers decide)."""
        return None

    def after_events(self) -> None:
        """Runs after each round of events and due timers."""

    def finish(self) -> int:
        """Runs after the loop ended; returns the exit code."""
        return self.exit_code

    def dispatch(self, events) -> None:
        for key, mask in events:
            key.data(mask)

    # --- the skeleton ------------------------------------------------------------

    def watch(self, fileobj, handler, events: int = selectors.EVENT_READ) -> None:
        """Call ``handler(mask)`` when ``fileobj`` is ready."""
        self.selector.register(fileobj, events, handler)

    def exit_with(self, code: int) -> None:
        """End the loop with this exit code (the stop runs as for any other stop)."""
        self.exit_code = code
        self.begin_stop()

    def run(self) -> int:
        self._wakeup_fd = _install_signals()
        self.selector = selectors.DefaultSelector()
        try:
            self.watch(self._wakeup_fd, self._on_signals)
            self.watch(self.control.fileno(), self._on_control)
            self._beat(monotonic_ms())
            self.timers.every(HEARTBEAT_MS, self._beat)
            code = self.start()
            if code is not None:
                return code
            self._handlers = self.control_handlers()
            self.control.send(Op.READY, **self.ready_fields())
            self._loop()
            return self.finish()
        finally:
            self.selector.close()

    def _loop(self) -> None:
        timers, select = self.timers, self.selector.select
        poll = PollWindow(self.busy_poll_s)
        while not self.finished():
            now = monotonic_ms()
            timeout = timers.seconds_until_next(now)
            cap = self.poll_timeout()
            if cap is not None and cap < timeout:
                timeout = cap
            if timeout and poll.open():
                events = select(0)
                if events:
                    poll.caught()
                else:
                    sched_yield()  # a process woken on this CPU (the client, say) goes first
            else:
                events = select(timeout)
                if events and poll.ceiling:
                    poll.woke()
            self.dispatch(events)
            timers.run(monotonic_ms())
            self.after_events()

    def _beat(self, now_ms: int) -> None:
        self.slots.beat(self.slot, now_ms)

    def _on_signals(self, _mask: int) -> None:
        try:
            signals = os.read(self._wakeup_fd, 512)
        except BlockingIOError:
            return
        if signal.SIGTERM in signals:
            self.begin_stop()

    def _on_control(self, _mask: int) -> None:
        for message in self.control.receive_all():
            if message is None:  # the supervisor is gone
                self.begin_stop()
                continue
            op = message["op"]
            if op == Op.STOP:
                self.begin_stop()
            elif op == Op.RELOAD:
                self.reload(message["properties"])
            elif op in self._handlers:
                self._handlers[op](message)
            else:
                log.warning("ignoring an unknown control message %r", op)


class PollWindow:
    """How long the loop polls after its last event, adapted to the gaps between events
    the way a virtual machine's haltpoll governor adapts its idle polling.

    The window starts shut. An event that woke the loop from a sleep came ``gap``
    seconds after the one before it. A gap within the ceiling means a window that long
    would have caught the event without the sleep, so a window shorter than the gap
    doubles (from GROW_START_S, up to the ceiling). A gap past the ceiling means polling
    would have been wasted, so the window halves (and shuts below GROW_START_S). An event
    caught while polling keeps the window. So ping-pong traffic settles on a window just
    past its usual gap, and an idle loop, or one whose events come further apart than
    the ceiling, sleeps at once.
    """

    GROW_START_S = 20e-6

    __slots__ = ("ceiling", "window", "last_event", "clock")

    def __init__(self, ceiling_s: float, clock=monotonic):
        self.ceiling = ceiling_s
        self.window = 0.0
        self.last_event = float("-inf")
        self.clock = clock

    def open(self) -> bool:
        """Whether the loop should poll now rather than sleep."""
        return bool(self.window) and self.clock() - self.last_event < self.window

    def caught(self) -> None:
        """An event came while polling."""
        self.last_event = self.clock()

    def woke(self) -> None:
        """An event came while the loop slept: adapt the window to its gap."""
        now = self.clock()
        self.adapt(now - self.last_event)
        self.last_event = now

    def adapt(self, gap: float) -> None:
        if gap <= self.ceiling:
            if gap > self.window:
                self.window = min(self.ceiling, max(self.window * 2, self.GROW_START_S))
        else:
            half = self.window / 2
            self.window = half if half >= self.GROW_START_S else 0.0


def _install_signals() -> int:
    """TERM through a wake-up fd (returned); INT and QUIT exit at once; HUP and PIPE ignored."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(0))
    signal.signal(signal.SIGQUIT, lambda signum, frame: os._exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return read_fd
