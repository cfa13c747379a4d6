"""The acceptor process: one event loop for all client connections.

It accepts connections on the listening socket the supervisor made (so a respawned
acceptor keeps the port and its backlog), reads frames, answers fetches and OFFSETS
from the segment files, routes produces to the workers' rings (several requests per
ring publish, one eventfd wake-up per publish), and sends answers back in request
order. It takes orders from the supervisor over its control channel: a worker went
down or came up, stop, reload.

Hostile and careless clients are bounded: a connection with ``max.queued.responses``
answers waiting to be sent is not read until its client has read half of them; one
where no byte moved either way for ``connections.max.idle.ms`` is closed (unless it
waits for a worker); beyond ``max.connections`` (or when the process runs out of file
descriptors) new connections are closed or wait in the backlog, with a log line. A
request that raises anything unexpected closes its own connection, with the
traceback in the log, instead of taking every other connection down with the process.

Graceful stop: close the listener, stop reading, hand every queued produce to the
rings, wait (bounded) until acknowledged produces are answered and answers are sent,
then close and exit 0.
"""

import errno
import logging
import selectors
import socket
import time

from mpbroker.acceptor.connection import Connection
from mpbroker.acceptor.requests import RequestHandlers
from mpbroker.acceptor.routing import Router, WorkerRoute
from mpbroker.acceptor.segment_files import SegmentFiles
from mpbroker.clock import monotonic_ms
from mpbroker.config import config_from_properties
from mpbroker.ipc.counters import (BYTES_RECEIVED, CONNECTIONS_ACCEPTED, CONNECTIONS_OPEN, CONNECTIONS_REFUSED,
                                   MALFORMED_REQUESTS)
from mpbroker.ipc.ring import Ring
from mpbroker.ipc.slot_table import SlotState
from mpbroker.logging_setup import set_level
from mpbroker.process import install_child_signals, term_requested
from mpbroker.protocol.framing import READ_CHUNK, MalformedRequestError

log = logging.getLogger(__name__)

HEARTBEAT_MS = 500
ACCEPTS_PER_WAKEUP = 64
STOP_TIMEOUT_S = 10.0
FULL_RING_RETRY_S = 0.005
ACCEPT_BACKOFF_S = 0.1  # out of file descriptors: stop accepting for this long
MAX_IDLE_SWEEP_INTERVAL_S = 1.0


class Acceptor:
    def __init__(self, config, listener: socket.socket, request_rings, answer_rings, tables, slots, slot: int,
                 control, incarnation: int, counters):
        self.config = config
        self.counters = counters  # this process's row of the CounterTable
        self.listener = listener
        self.slots = slots
        self.slot = slot  # the acceptor's own heartbeat slot
        self.control = control
        outbox_limit = max(config.ring_buffer_bytes * 2, 16 << 20)
        routes = [WorkerRoute(index, request_rings[index], answer_rings[index], outbox_limit)
                  for index in range(len(request_rings))]
        self.router = Router(routes, incarnation, self._close, self._mark_ready, self._resume)
        self.files = SegmentFiles(tables, config.log_dir, config.num_workers)
        self.handlers = RequestHandlers(config, self.files, self.router, self._close, counters)
        self.selector = selectors.DefaultSelector()
        self.connections = {}  # fd -> Connection
        self._to_send = set()
        self._accepted = 0
        self._stopping = False
        self._stop_deadline = None
        self._last_refusal_log = 0.0
        self._wakeup_read = -1
        self._scratch = bytearray(READ_CHUNK)  # every connection receives into it (FrameReader)
        self._now = time.monotonic()  # when the current loop iteration began
        self._next_beat = self._next_idle_sweep = self._next_timer = self._now  # timers, in time.monotonic()
        self._accept_again_at = None  # set while accepting is paused (out of file descriptors)

    # --- setup ------------------------------------------------------------------

    def run(self) -> int:
        self._wakeup_read = install_child_signals()
        self.counters[CONNECTIONS_OPEN] = 0  # a predecessor's connections died with it
        for route in self.router.routes:
            if self.slots.read(route.slot).state == SlotState.UP:
                self.router.worker_up(route)
            self.selector.register(route.answers.data_fd, selectors.EVENT_READ, ("answers", route))
            self.selector.register(route.requests.space_fd, selectors.EVENT_READ, ("space", route))
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, ("listener", None))
        self.selector.register(self.control.fileno(), selectors.EVENT_READ, ("control", None))
        self.selector.register(self._wakeup_read, selectors.EVENT_READ, ("signal", None))
        log.info("accepting connections on %s:%d", *self.listener.getsockname()[:2])
        while not self._finished():
            if self._to_send:
                timeout = 0
            elif self.router.pending_outboxes:
                timeout = FULL_RING_RETRY_S
            else:
                timeout = self._next_timer - self._now
            events = self.selector.select(timeout)
            self._now = now = time.monotonic()
            for key, mask in events:
                kind, target = key.data
                if kind == "connection":
                    if mask & selectors.EVENT_READ:
                        self._read(target)
                    if mask & selectors.EVENT_WRITE and not target.closed:
                        self._to_send.add(target)
                elif kind == "answers":
                    self.router.on_answers(target)
                elif kind == "space":
                    Ring.clear_notification(target.requests.space_fd)
                elif kind == "listener":
                    self._accept()
                elif kind == "control":
                    self._on_control()
                elif kind == "signal":
                    self._on_signal()
            self.router.flush_outboxes()
            self._send_ready()
            if now >= self._next_timer:
                self._run_timers(now)
        for connection in list(self.connections.values()):
            self._close(connection, None)
        self.files.close()
        log.info("stopped")
        return 0

    def _run_timers(self, now: float) -> None:
        """Whatever is due of the heartbeat, the idle sweep and accepting again."""
        if now >= self._next_beat:
            self.slots.beat(self.slot, monotonic_ms())
            self._next_beat = now + HEARTBEAT_MS / 1000
        if now >= self._next_idle_sweep:
            self._close_idle_connections()
        if self._accept_again_at is not None and now >= self._accept_again_at:
            self._resume_accepting()
        self._next_timer = min(self._next_beat, self._next_idle_sweep, self._accept_again_at or self._next_beat)

    # --- connections ------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.counters[CONNECTIONS_REFUSED] += 1
                    self._log_refusal(f"cannot accept a connection: {exc.strerror}; "
                                      f"accepting again in {ACCEPT_BACKOFF_S}s")
                    self._pause_accepting()  # the listener stays readable: do not spin on it
                    return
                raise
            if len(self.connections) >= self.config.max_connections:
                self.counters[CONNECTIONS_REFUSED] += 1
                self._log_refusal(f"refusing {peer}: max.connections ({self.config.max_connections}) reached")
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._accepted += 1
            connection = Connection(sock, peer, self.config.max_socket_request_bytes, self._accepted, self.counters,
                                    self._scratch, self._now)
            self.connections[connection.fd] = connection
            self.counters[CONNECTIONS_ACCEPTED] += 1
            self.counters[CONNECTIONS_OPEN] = len(self.connections)
            self.selector.register(sock, selectors.EVENT_READ, ("connection", connection))

    def _pause_accepting(self) -> None:
        self.selector.unregister(self.listener)
        self._accept_again_at = self._now + ACCEPT_BACKOFF_S
        self._next_timer = min(self._next_timer, self._accept_again_at)

    def _resume_accepting(self) -> None:
        self._accept_again_at = None
        if not self._stopping:
            self.selector.register(self.listener, selectors.EVENT_READ, ("listener", None))

    def _close_idle_connections(self) -> None:
        """Close connections where nothing moved for connections.max.idle.ms, unless
        the broker itself keeps them waiting (a worker's answer or queue)."""
        idle_ms = self.config.connections_max_idle_ms
        if not idle_ms:  # never: look again later, in case a reload sets it
            self._next_idle_sweep = self._now + MAX_IDLE_SWEEP_INTERVAL_S
            return
        self._next_idle_sweep = self._now + min(MAX_IDLE_SWEEP_INTERVAL_S, max(0.01, idle_ms / 4000))
        cutoff = self._now - idle_ms / 1000
        idle = [connection for connection in self.connections.values()
                if connection.last_active < cutoff and not connection.awaiting_worker]
        for connection in idle:
            self._close(connection, None)
        if idle:
            shown = ", ".join(repr(connection) for connection in idle[:3]) + (", ..." if len(idle) > 3 else "")
            log.info("closed %d connections idle for more than %d ms (connections.max.idle.ms): %s",
                     len(idle), idle_ms, shown)

    def _log_refusal(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_refusal_log > 5:
            log.warning("%s", message)
            self._last_refusal_log = now

    def _read(self, connection) -> None:
        try:
            view = connection.reader.receive_buffer()
            received = connection.sock.recv_into(view)
            del view
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(connection, f"receive failed: {exc.strerror}")
            return
        if received == 0:
            self._close(connection, None)
            return
        connection.reader.commit(received)
        connection.last_active = self._now
        self.counters[BYTES_RECEIVED] += received
        self._process_frames(connection)

    def _process_frames(self, connection) -> None:
        max_queued = self.config.max_queued_responses
        try:
            while not connection.paused and not connection.closed:
                if connection.queued >= max_queued:
                    connection.throttled = True  # read on once the client has read half
                    break
                frame = connection.reader.next_frame()
                if frame is None:
                    break
                self.handlers.handle(connection, frame)
        except MalformedRequestError as exc:
            self.counters[MALFORMED_REQUESTS] += 1
            self._close(connection, f"malformed request: {exc}")
            return
        except Exception:  # a bug: lose this connection, not every connection
            log.exception("unexpected error handling a request of %r", connection)
            self._close(connection, "unexpected error (see above)")
            return
        finally:
            if not connection.closed:
                connection.reader.detach()  # before another connection receives into the scratch buffer
        if connection.closed:
            return
        if connection.responses:
            self._to_send.add(connection)
        if connection.paused or connection.throttled:
            self._update_interest(connection)

    def _resume(self, connection) -> None:
        if connection.closed:
            return
        self._process_frames(connection)
        self._update_interest(connection)

    def _mark_ready(self, connection) -> None:
        if not connection.closed:
            self._to_send.add(connection)

    def _send_ready(self) -> None:
        to_send, self._to_send = self._to_send, set()
        for connection in to_send:
            if connection.closed:
                continue
            sent_before = connection.bytes_sent
            try:
                done = connection.send()
            except OSError as exc:
                self._close(connection, f"send failed: {exc}")
                continue
            if connection.bytes_sent != sent_before:
                connection.last_active = self._now
            if done and connection.closing and connection.idle:
                self._close(connection, None)
                continue
            if connection.wants_write != (not done):
                connection.wants_write = not done
                self._update_interest(connection)
            if connection.throttled and connection.queued <= self.config.max_queued_responses // 2:
                connection.throttled = False
                self._resume(connection)

    def _update_interest(self, connection) -> None:
        if connection.closed:  # e.g. resumed, then closed for a malformed frame it had sent meanwhile
            return
        events = 0
        if not (connection.paused or connection.throttled or connection.closing or self._stopping):
            events |= selectors.EVENT_READ
        if connection.wants_write:
            events |= selectors.EVENT_WRITE
        key = ("connection", connection)
        try:
            if events:
                self.selector.modify(connection.sock, events, key)
            else:
                self.selector.unregister(connection.sock)
        except KeyError:
            if events:
                self.selector.register(connection.sock, events, key)

    def _close(self, connection, reason) -> None:
        if connection.closed:
            return
        if reason:
            log.warning("closing %r: %s", connection, reason)
        try:
            self.selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        self.connections.pop(connection.fd, None)
        self.counters[CONNECTIONS_OPEN] = len(self.connections)
        self.router.forget(connection)
        connection.close()

    # --- supervisor -------------------------------------------------------------

    def _on_control(self) -> None:
        for message in self.control.receive_all():
            if message is None:
                self._begin_stop()  # the supervisor is gone
                continue
            op = message["op"]
            if op == "worker_down":
                route = self.router.routes[message["slot"]]
                self.router.worker_down(route)
                self.control.send("worker_down_ack", slot=message["slot"], generation=message["generation"])
            elif op == "worker_up":
                self.router.worker_up(self.router.routes[message["slot"]])
            elif op == "stop":
                self._begin_stop()
            elif op == "reload":
                config, _ = config_from_properties(message["properties"])
                self.config = self.handlers.config = config
                set_level(config.log_level)

    def _on_signal(self) -> None:
        if term_requested(self._wakeup_read):
            self._begin_stop()

    def _begin_stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._stop_deadline = time.monotonic() + STOP_TIMEOUT_S
        try:
            self.selector.unregister(self.listener)
        except (KeyError, ValueError):
            pass  # not registered: accepting was paused
        self.listener.close()
        for connection in list(self.connections.values()):
            connection.closing = True
            self._update_interest(connection)
            self._to_send.add(connection)
        log.info("stopping: %d connections, %d produces in flight", len(self.connections), self.router.in_flight)

    def _finished(self) -> bool:
        if not self._stopping:
            return False
        if time.monotonic() > self._stop_deadline:
            log.warning("stop timed out with %d produces in flight", self.router.in_flight)
            return True
        pending_acks = any(route.acked for route in self.router.routes if route.up)
        busy = any(not connection.idle for connection in self.connections.values())
        return not (self.router.pending_outboxes or pending_acks or busy)
