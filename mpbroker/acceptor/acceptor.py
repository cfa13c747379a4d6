"""The acceptor process: one event loop for all client connections.

It accepts connections on the listening sockets the supervisor made (so a respawned
acceptor keeps the ports and their backlogs): the 0.7 port and the modern Kafka
protocol's (``kafka.port``), each connection handled by its protocol's handlers
(``requests`` for 0.7, ``kafka`` for the modern one). It reads frames, answers fetches and OFFSETS
from the segment files, routes produces to the workers' rings (several requests per
ring publish, one eventfd wake-up per publish), and sends answers back in request
order. It runs on the child-process skeleton (``process.child``: signals, heartbeat,
timers, the supervisor's messages), which hands it a worker that went down or came
up, stop and reload.

Hostile and careless clients are bounded: a connection with ``max.queued.responses``
answers waiting to be sent is not read until its client has read half of them; one
where no byte moved either way for ``connections.max.idle.ms`` is closed (unless it
waits for a worker), and so is one that takes longer than ``request.receive.timeout.ms``
to send a request it began (``limits``); beyond ``max.connections``, or
``max.connections.per.ip`` from one address (or when the process runs out of file
descriptors), new connections are closed or wait in the backlog, with a log line. A
request that raises anything unexpected closes its own connection, with the
traceback in the log, instead of taking every other connection down with the process.
Connections reset by their clients (or broken pipes) are normal: they are logged at
most once per 10 s, with a count (``throttled_log``).

Each connection owns its state (``connection``): this loop asks it for its transitions
(what to do after a send, whether it still reads) and applies its ``interest()`` to the
selector in one place, ``_update_interest``. Routing (``routing.Router``) never calls
back into this loop: its calls hand back the connections to close, to send for and to
read again, and the loop acts on them after.

Graceful stop: close the listener, stop reading, hand every queued produce to the
rings, wait (bounded) until acknowledged produces are answered and answers are sent,
then close and exit 0.
"""

import errno
import functools
import logging
import selectors
import socket
import time

from mpbroker.acceptor.connection import CLOSE, READ_AGAIN, Connection
from mpbroker.acceptor.kafka.handlers import KafkaRequestHandlers
from mpbroker.acceptor.limits import AddressCounts, address_of, overdue, sweep_interval
from mpbroker.acceptor.replica_requests import ReplicaRequests
from mpbroker.acceptor.requests import RequestHandlers
from mpbroker.acceptor.routing import ProduceRefused, Router, WorkerRoute
from mpbroker.acceptor.segment_files import SegmentFiles
from mpbroker.acceptor.topic_deletion import TopicDeletions
from mpbroker.codec.framing import READ_CHUNK, MalformedRequestError
from mpbroker.config.broker_config import config_from_properties
from mpbroker.ipc.control import Op
from mpbroker.ipc.counters import (
    BYTES_RECEIVED,
    CONNECTIONS_ACCEPTED,
    CONNECTIONS_OPEN,
    CONNECTIONS_REFUSED,
    KAFKA_CONNECTIONS_ACCEPTED,
    KAFKA_CONNECTIONS_OPEN,
    MALFORMED_REQUESTS,
)
from mpbroker.ipc.ring import Ring
from mpbroker.ipc.slot_table import SlotState
from mpbroker.logging_setup import set_level
from mpbroker.process.child import ChildProcess
from mpbroker.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

ACCEPTS_PER_WAKEUP = 64
STOP_TIMEOUT_S = 10.0
FULL_RING_RETRY_S = 0.005
ACCEPT_BACKOFF_S = 0.1  # out of file descriptors: stop accepting for this long
PEER_GONE_ERRNOS = (errno.ECONNRESET, errno.EPIPE)  # normal client behaviour: throttled log lines


class Acceptor(ChildProcess):
    def __init__(self, config, listener: socket.socket, request_rings, answer_rings, tables, slots, slot: int,
                 control, incarnation: int, counters, kafka_listener: socket.socket | None = None,
                 group_snapshot=None):
        super().__init__(slots, slot, control)
        self.config = config
        self.busy_poll_s = config.busy_poll_us / 1e6
        self.counters = counters  # this process's row of the CounterTable
        self.listener = listener
        outbox_limit = max(config.ring_buffer_bytes * 2, 16 << 20)
        routes = [WorkerRoute(index, request_rings[index], answer_rings[index], outbox_limit)
                  for index in range(len(request_rings))]
        self.router = Router(routes, incarnation)
        self.files = SegmentFiles(tables, config.log_dir, config.num_workers)
        self.replica_requests = ReplicaRequests(self.files, self.router, self.timers,
                                                lambda connection: self._to_send.add(connection))
        create_topic = (lambda topic, partitions, **fields: self.control.send(Op.CREATE_TOPIC, topic=topic,
                                                                              partitions=partitions, **fields)) \
            if config.enable_zookeeper else None
        self.handlers = RequestHandlers(config, self.files, self.router, self._close, counters,
                                        self.replica_requests, create_topic)
        self.deletions = TopicDeletions(config.log_dir, self.router, self.handlers, self._topic_deleted)
        ask_registrar = (lambda number, topics, timeout_ms: self.control.send(
            Op.DELETE_TOPICS, number=number, topics=topics, timeout_ms=timeout_ms)) \
            if config.enable_zookeeper else None
        self.kafka_listener = kafka_listener  # the modern protocol's, or None (kafka.port=-1)
        self.kafka_handlers = KafkaRequestHandlers(
            config, self.files, self.router, self.handlers, self.timers, counters,
            lambda connection: self._to_send.add(connection),
            kafka_listener.getsockname()[1], None if config.enable_zookeeper else self.deletions,
            ask_registrar, group_snapshot) if kafka_listener is not None else None
        self._listeners = {listener: self.handlers}  # listening socket -> the handlers of its protocol
        if kafka_listener is not None:
            self._listeners[kafka_listener] = self.kafka_handlers
        self.connections = {}  # fd -> Connection
        self._to_send = set()
        self._accepted = 0
        self._stop_deadline = None
        self._addresses = AddressCounts()  # open connections per client address
        self._throttled_log = ThrottledLog(log)  # resets and refusals: bursts, not a line each
        self._scratch = bytearray(READ_CHUNK)  # every connection receives into it (FrameReader)
        self._now = time.monotonic()  # when the current round of events began (connection clocks)
        self._accept_paused = False  # out of file descriptors: accepting again after a back-off

    # --- the process (process.child.ChildProcess) --------------------------------

    def start(self):
        self.counters[CONNECTIONS_OPEN] = 0  # a predecessor's connections died with it
        self.counters[KAFKA_CONNECTIONS_OPEN] = 0
        for route in self.router.routes:
            if self.slots.read(route.slot).state == SlotState.UP:
                self.router.worker_up(route)
            self.watch(route.answers.data_fd, functools.partial(self._on_answers, route))
            self.watch(route.requests.space_fd, functools.partial(self._on_ring_space, route))
        self.deletions.resume()  # what a predecessor began (its markers are in log.dir)
        self._watch_listeners()
        self.timers.once(0, self._sweep)
        log.info("accepting connections on %s:%d", *self.listener.getsockname()[:2])
        if self.kafka_listener is not None:
            log.info("accepting modern Kafka protocol connections on %s:%d", *self.kafka_listener.getsockname()[:2])
        return None

    def control_handlers(self) -> dict:
        return {Op.WORKER_DOWN: self._on_worker_down, Op.WORKER_UP: self._on_worker_up, Op.ROLES: self._on_roles,
                Op.CLUSTER: self._on_cluster, Op.DELETE_LOCAL: self._on_delete_local,
                Op.TOPICS_DELETED: self._on_topics_deleted}

    def _on_delete_local(self, message: dict) -> None:
        """The registrar: delete this broker's logs of a topic the cluster deletes."""
        try:
            self.deletions.delete(message["topic"])
        except OSError as exc:
            log.error("cannot begin deleting topic %s: %s", message["topic"], exc)

    def _on_topics_deleted(self, message: dict) -> None:
        if self.kafka_handlers is not None:
            self.kafka_handlers.delete_topics.registrar_answered(message["number"], message["results"])

    def _topic_deleted(self, topic: str) -> None:
        """Every worker deleted its logs of ``topic``: tell who asked; the fetches
        waiting for it are answered (unknown topic)."""
        if self.config.enable_zookeeper:
            self.control.send(Op.LOCAL_DELETED, topic=topic)
        if self.kafka_handlers is not None:
            if not self.config.enable_zookeeper:
                self.kafka_handlers.delete_topics.topic_deleted(topic)
            self.kafka_handlers.tick()

    def _on_cluster(self, message: dict) -> None:
        if self.kafka_handlers is not None:
            self.kafka_handlers.metadata.set_cluster(message)

    def _on_roles(self, message: dict) -> None:
        if "topics" in message:
            self.handlers.set_replicated(message["topics"])

    def poll_timeout(self):
        if self._to_send:
            return 0
        if self.router.pending_outboxes:
            return FULL_RING_RETRY_S
        return None

    def dispatch(self, events) -> None:
        """Connections are most of the events: told apart here, without a call per event."""
        self._now = time.monotonic()
        for key, mask in events:
            target = key.data
            if target.__class__ is Connection:
                if mask & selectors.EVENT_READ:
                    self._read(target)
                if mask & selectors.EVENT_WRITE and not target.closed:
                    self._to_send.add(target)
            else:
                target(mask)

    def after_events(self) -> None:
        resumed = self.router.flush_outboxes()
        if resumed:
            self._resume(resumed)
        self._send_ready()

    def finish(self) -> int:
        for connection in list(self.connections.values()):
            self._close(connection, None)
        self.files.close()
        log.info("stopped")
        return 0

    def _on_answers(self, route, _mask: int) -> None:
        self._act_on(self.router.on_answers(route))
        if self.kafka_handlers is not None:
            self.kafka_handlers.tick()  # an append may have given a waiting fetch its bytes

    @staticmethod
    def _on_ring_space(route, _mask: int) -> None:
        Ring.clear_notification(route.requests.space_fd)

    def _watch_listeners(self) -> None:
        for listener in self._listeners:
            listener.setblocking(False)
            self.watch(listener, functools.partial(self._on_listener, listener))

    def _on_listener(self, listener, _mask: int) -> None:
        if not self.stopping:  # a stop earlier in this round of events closed the listener
            self._accept(listener)

    def _sweep(self, _now_ms: int) -> None:
        """Close the overdue connections; again after ``limits.sweep_interval``."""
        self._close_overdue_connections()
        self._throttled_log.flush()
        interval_s = sweep_interval(self.config.connections_max_idle_ms, self.config.request_receive_timeout_ms)
        self.timers.once(interval_s * 1000, self._sweep)

    # --- connections ------------------------------------------------------------

    def _accept(self, listener) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.counters[CONNECTIONS_REFUSED] += 1
                    self._throttled_log.event("accept", logging.WARNING,
                                              f"cannot accept a connection: {exc.strerror}; "
                                              f"accepting again in {ACCEPT_BACKOFF_S}s")
                    self._pause_accepting()  # the listener stays readable: do not spin on it
                    return
                raise
            if len(self.connections) >= self.config.max_connections:
                self._refuse(sock, "max.connections", f"refusing {peer}: max.connections "
                                                      f"({self.config.max_connections}) reached")
                continue
            address = address_of(peer)
            if not self._addresses.admit(address, self.config.max_connections_per_ip):
                self._refuse(sock, "max.connections.per.ip",
                             f"refusing {peer}: {self._addresses.open_from(address)} connections from {address} "
                             f"already (max.connections.per.ip)")
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._accepted += 1
            connection = Connection(sock, peer, self.config.max_socket_request_bytes, self._accepted, self.counters,
                                    self._scratch, self._now, self._listeners[listener])
            self.connections[connection.fd] = connection
            self.counters[CONNECTIONS_ACCEPTED] += 1
            self.counters[CONNECTIONS_OPEN] = len(self.connections)
            if connection.handlers is self.kafka_handlers:
                self.counters[KAFKA_CONNECTIONS_ACCEPTED] += 1
                self.counters[KAFKA_CONNECTIONS_OPEN] += 1
            self.selector.register(sock, selectors.EVENT_READ, connection)

    def _refuse(self, sock: socket.socket, kind: str, message: str) -> None:
        self.counters[CONNECTIONS_REFUSED] += 1
        self._throttled_log.event(kind, logging.WARNING, message)
        sock.close()

    def _pause_accepting(self) -> None:
        for listener in self._listeners:
            self.selector.unregister(listener)
        self._accept_paused = True
        self.timers.once(ACCEPT_BACKOFF_S * 1000, self._resume_accepting)

    def _resume_accepting(self, _now_ms: int) -> None:
        self._accept_paused = False
        if not self.stopping:
            self._watch_listeners()

    def _close_overdue_connections(self) -> None:
        """Close connections past connections.max.idle.ms or request.receive.timeout.ms
        (``limits.overdue`` says which), with one log line for each kind."""
        idle_ms = self.config.connections_max_idle_ms
        receive_ms = self.config.request_receive_timeout_ms
        idle, slow = overdue(self.connections.values(), self._now, idle_ms, receive_ms)
        slow_what = f"that took more than {receive_ms} ms to send a request (request.receive.timeout.ms)"
        for connections, what in ((idle, f"idle for more than {idle_ms} ms (connections.max.idle.ms)"),
                                  (slow, slow_what)):
            if not connections:
                continue
            for connection in connections:
                self._close(connection, None)
            shown = ", ".join(repr(connection) for connection in connections[:3])
            log.info("closed %d connections %s: %s%s", len(connections), what, shown,
                     ", ..." if len(connections) > 3 else "")

    def _read(self, connection) -> None:
        try:
            received = connection.receive(self._now)
        except OSError as exc:
            self._close_failed(connection, "receive failed", exc)
            return
        if received <= 0:
            if received == 0:  # the peer closed (-1: nothing there after all)
                self._close(connection, None)
            return
        self.counters[BYTES_RECEIVED] += received
        self._process_frames(connection)

    def _process_frames(self, connection) -> None:
        try:
            held = connection.handle_frames(connection.handlers, self.config.max_queued_responses)
        except MalformedRequestError as exc:
            self.counters[MALFORMED_REQUESTS] += 1
            self._close(connection, f"malformed request: {exc}")
            return
        except ProduceRefused as exc:
            self._close(connection, f"fire-and-forget produce refused: {exc}")
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
        if held:  # paused or throttled: not read for now
            self._update_interest(connection)

    def _resume(self, connections) -> None:
        """Read these connections again (they were paused or throttled): the frames they
        sent meanwhile first; their request clock starts again (``limits``)."""
        for connection in connections:
            if connection.closed:  # meanwhile, e.g. its fire-and-forget produce died with the worker
                continue
            connection.reader.restart_clock(self._now)
            self._process_frames(connection)
            self._update_interest(connection)

    def _act_on(self, outcome) -> None:
        """Do what a router call left to do (``routing.Outcome``), in its order."""
        for connection, reason in outcome.to_close:
            self._close(connection, reason)
        for connection in outcome.ready:
            if not connection.closed:
                self._to_send.add(connection)
        if outcome.to_resume:
            self._resume(outcome.to_resume)
        if outcome.woken:
            self.replica_requests.wake(outcome.woken)
        for slot, topic in outcome.deleted:
            self.deletions.on_deleted(slot, topic)

    def _send_ready(self) -> None:
        to_send, self._to_send = self._to_send, set()
        max_queued = self.config.max_queued_responses
        for connection in to_send:
            if connection.closed:
                continue
            try:
                done = connection.send(self._now)
            except OSError as exc:
                self._close_failed(connection, "send failed", exc)
                continue
            step = connection.after_send(done, max_queued)
            if step:  # usually NOTHING
                if step == CLOSE:
                    self._close(connection, None)
                elif step == READ_AGAIN:
                    self._resume((connection,))  # its frames, then its interest
                else:  # NEW_INTEREST
                    self._update_interest(connection)

    def _update_interest(self, connection) -> None:
        """Apply the connection's ``interest()`` to the selector: the one place that does."""
        if connection.closed:  # e.g. resumed, then closed for a malformed frame it had sent meanwhile
            return
        events = connection.interest(self.stopping)
        try:
            if events:
                self.selector.modify(connection.sock, events, connection)
            else:
                self.selector.unregister(connection.sock)
        except KeyError:
            if events:
                self.selector.register(connection.sock, events, connection)

    def _close_failed(self, connection, what: str, exc: OSError) -> None:
        """Close after a failed receive or send: a reset or a broken pipe is the client
        leaving (throttled log line), anything else gets a line of its own."""
        reason = f"{what}: {exc.strerror or exc}"
        if exc.errno in PEER_GONE_ERRNOS:
            self._throttled_log.event("peer gone", logging.INFO, f"closing {connection!r}: {reason}")
            reason = None
        self._close(connection, reason)

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
        if connection.handlers is self.kafka_handlers and self.counters[KAFKA_CONNECTIONS_OPEN]:
            self.counters[KAFKA_CONNECTIONS_OPEN] -= 1
        self._addresses.release(address_of(connection.peer))
        self.router.forget(connection)
        connection.close()

    # --- supervisor -------------------------------------------------------------

    def _on_worker_down(self, message: dict) -> None:
        route = self.router.routes[message["slot"]]
        self._act_on(self.router.worker_down(route))
        self.deletions.worker_down(route.slot)
        self.control.send(Op.WORKER_DOWN_ACK, slot=message["slot"], generation=message["generation"])

    def _on_worker_up(self, message: dict) -> None:
        route = self.router.routes[message["slot"]]
        self.router.worker_up(route)
        self.deletions.worker_up(route)

    def reload(self, properties: dict) -> None:
        config, _ = config_from_properties(properties)
        self.config = self.handlers.config = config
        set_level(config.log_level)

    def begin_stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self._stop_deadline = time.monotonic() + STOP_TIMEOUT_S
        for listener in self._listeners:
            try:
                self.selector.unregister(listener)
            except (KeyError, ValueError):
                pass  # not registered: accepting was paused
            listener.close()
        self.replica_requests.answer_all()  # followers' fetches waiting for news get what there is
        if self.kafka_handlers is not None:
            self.kafka_handlers.fetch.answer_all()  # and so do modern consumers' fetches
        for connection in list(self.connections.values()):
            connection.begin_closing()
            self._update_interest(connection)
            self._to_send.add(connection)
        log.info("stopping: %d connections, %d produces in flight", len(self.connections), self.router.in_flight)

    def finished(self) -> bool:
        if not self.stopping:
            return False
        if time.monotonic() > self._stop_deadline:
            log.warning("stop timed out with %d produces in flight", self.router.in_flight)
            return True
        pending_acks = any(route.acked for route in self.router.routes if route.up)
        busy = any(not connection.idle for connection in self.connections.values())
        return not (self.router.pending_outboxes or pending_acks or busy)
