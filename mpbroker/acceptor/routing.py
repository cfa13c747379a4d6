"""Produce requests on their way to the owning worker, and their answers back.

One ``WorkerRoute`` per worker slot: the request ring the acceptor writes, the answer
ring it reads, an outbox for records that did not fit the ring yet, and the produce
requests in flight (acknowledged ones by request id with the response they fill;
fire-and-forget ones in order, so one DONE record retires many).

When a worker dies the supervisor says so; every request in flight to it then fails
at once: acknowledged produces get PartitionUnavailable (7), fire-and-forget
produces have their connection closed so the client knows. Until the worker is back,
new produces for its partitions fail the same way; fetches go on (they are served
from the files).

Backpressure: when a route's outbox holds more than its limit, the connection that
pushed it over is paused (``Connection.pause``: not read) until the outbox drains to
half; then it is unpaused and handed back to be read again.

The router never calls back into the acceptor: closing or resuming a connection runs
the acceptor's code, which may pause or forget connections, and the router may be
iterating its own sets at that moment. It sets no connection state either: it asks
the connection to ``pause`` or ``unpause``, which changes the connection's flag and
nothing else. Its calls hand back what is left to do (``Outcome``: connections to
close, whose answers became ready, to read again), and the acceptor acts on that once
the router is done. A fire-and-forget produce that cannot be queued raises
``ProduceRefused`` to the request's handler.
"""

import collections
import logging

from mpbroker.acceptor.connection import Response
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode
from mpbroker.ipc import messages
from mpbroker.ipc.messages import MODE_MASK, Mode
from mpbroker.ipc.ring import Ring

log = logging.getLogger(__name__)


def answer(response, error: int, partition: int, offset: int, next_offset: int, reason: str) -> None:
    """Give an acknowledged produce its answer: a 0.7 ``Response`` gets the PRODUCE_ACKED
    bytes; anything else (a modern produce's part, ``acceptor.kafka.produce``) is told
    through its ``ack`` (the error as the ring carries it: ``messages.KAFKA_ERROR_BASE``)."""
    if response.__class__ is Response:
        response.fill([responses.produce_ack_response(error, partition, offset, next_offset)])
    else:
        response.ack(error, partition, offset, next_offset, reason)


class ProduceRefused(Exception):
    """A fire-and-forget produce that cannot be queued (its worker is down): close its
    connection, so that the client knows."""


class Outcome:
    """What a router call leaves the acceptor to do, in this order: close ``to_close``
    (``(connection, reason)`` pairs), send for ``ready`` (an answer of theirs became
    ready), read ``to_resume`` again (their worker's outbox drained or died), answer
    the followers' fetches waiting for the partitions in ``woken``, note the topics in
    ``deleted`` (``(worker slot, topic)``: that worker has no log of it left). Closed
    connections may appear in the later lists: skip them."""

    __slots__ = ("to_close", "ready", "to_resume", "woken", "deleted")

    def __init__(self):
        self.to_close = []
        self.ready = []
        self.to_resume = []
        self.woken = []
        self.deleted = []


class WorkerRoute:
    def __init__(self, slot: int, requests: Ring, answers: Ring, outbox_limit: int):
        self.slot = slot
        self.requests = requests
        self.answers = answers
        self.up = False
        self.outbox = collections.deque()  # (record kind, record parts, bytes); KIND_PRODUCE_BATCH: one entry
        self.outbox_bytes = 0
        self.outbox_limit = outbox_limit
        self.paused = set()  # connections not read until the outbox drains
        self.acked = {}  # request id -> (connection, Response, partition)
        self.fire_and_forget = collections.OrderedDict()  # request id -> connection


class Router:
    def __init__(self, routes, incarnation: int):
        self.routes = routes
        # Request ids are unique across acceptor lives, so a late answer meant for a
        # previous acceptor never matches a request of this one.
        self._next_id = incarnation << 40

    def produce(self, connection, topic_bytes: bytes, partition: int, mode: int, message_set, route,
                response=None) -> None:
        """Queue one produce for ``route``'s worker (``response`` for acknowledged modes).
        A worker that is down fills ``response`` with PartitionUnavailable, or raises
        ``ProduceRefused`` for a fire-and-forget produce."""
        if not route.up:
            if response is None:
                raise ProduceRefused(f"worker {route.slot} is restarting")
            answer(response, ErrorCode.PARTITION_UNAVAILABLE, partition, -1, -1, "")
            return
        self._next_id += 1
        request_id = self._next_id
        if mode & MODE_MASK == Mode.FIRE_AND_FORGET:
            route.fire_and_forget[request_id] = connection
        else:
            route.acked[request_id] = (connection, response, partition)
        size = messages.entry_bytes(topic_bytes, message_set)
        if size <= route.requests.max_record_body:
            route.outbox.append((messages.KIND_PRODUCE_BATCH,
                                 messages.entry_parts(request_id, topic_bytes, partition, mode, message_set), size))
            route.outbox_bytes += size
        else:  # larger than a ring record: fragments, put together by the worker
            for parts in messages.produce_fragments(request_id, topic_bytes, partition, mode, message_set,
                                                    route.requests.max_record_body):
                fragment_bytes = len(parts[0]) + len(parts[1]) + len(parts[2])
                route.outbox.append((messages.KIND_PRODUCE, parts, fragment_bytes))
                route.outbox_bytes += fragment_bytes
        if route.outbox_bytes > route.outbox_limit and connection.pause():
            route.paused.add(connection)

    @staticmethod
    def notify(route, kind: int, parts: tuple) -> bool:
        """Queue a record that is not a produce (a follower's positions, a topic to
        delete) for ``route``'s worker, behind what was queued before; dropped while the
        worker is down (False: its successor is told again)."""
        if route.up:
            size = sum(len(part) for part in parts)
            route.outbox.append((kind, parts, size))
            route.outbox_bytes += size
        return route.up

    def flush_outboxes(self):
        """Move queued requests into the rings: runs of small produces share one record;
        one publish (one wake-up) per ring. Returns the connections to read again (their
        worker's outbox drained to half its limit)."""
        resumed = ()  # no list made on the usual iteration
        for route in self.routes:
            if route.outbox:
                self._flush(route)
                if route.paused and route.outbox_bytes <= route.outbox_limit // 2:
                    resumed = [*resumed, *self._unpause(route)]
        return resumed

    @staticmethod
    def _unpause(route) -> list:
        """The route's paused connections, no longer paused; the route starts a new set
        (a resumed connection may pause again)."""
        connections, route.paused = route.paused, set()
        for connection in connections:
            connection.unpause()
        return list(connections)

    @staticmethod
    def _flush(route) -> None:
        ring = route.requests
        outbox = route.outbox
        limit = ring.max_record_body
        batch_kind = messages.KIND_PRODUCE_BATCH
        while outbox:
            kind, parts, size = outbox[0]
            if kind != batch_kind:
                if not ring.try_write(kind, *parts):
                    break
                outbox.popleft()
                route.outbox_bytes -= size
                continue
            batch = []
            batch_bytes = count = 0
            for kind, parts, size in outbox:
                if kind != batch_kind or batch_bytes + size > limit:
                    break
                batch.extend(parts)
                batch_bytes += size
                count += 1
            if not ring.try_write(messages.KIND_PRODUCE_BATCH, *batch):
                break
            for _ in range(count):
                outbox.popleft()
            route.outbox_bytes -= batch_bytes
        ring.publish()

    @property
    def pending_outboxes(self) -> bool:
        for route in self.routes:  # a loop, not any(): asked once per event-loop iteration
            if route.outbox:
                return True
        return False

    def on_answers(self, route) -> Outcome:
        """Handle every record the worker published; returns what is left to do."""
        outcome = Outcome()
        Ring.clear_notification(route.answers.data_fd)
        records = route.answers.read()
        for kind, body in records:
            if kind == messages.KIND_ACK:
                self._on_ack(route, outcome.ready, *messages.decode_ack(body))
            elif kind == messages.KIND_DONE:
                self._on_done(route, messages.decode_done(body))
            elif kind == messages.KIND_CLOSE:
                request_id, reason = messages.decode_close(body)
                connection = route.fire_and_forget.pop(request_id, None)
                if connection is not None:
                    outcome.to_close.append((connection, reason))
            elif kind == messages.KIND_WAKE:
                outcome.woken += messages.decode_wake(body)
            elif kind == messages.KIND_TOPIC_DELETED:
                outcome.deleted.append((route.slot, messages.decode_topic(body)))
        route.answers.release()
        return outcome

    @staticmethod
    def _on_ack(route, ready, request_id, error, partition, offset, next_offset, reason) -> None:
        pending = route.acked.pop(request_id, None)
        if pending is None:
            return  # meant for a previous acceptor, or its connection is gone
        connection, response, _ = pending
        if response.__class__ is Response:
            response.fill([responses.produce_ack_response(error, partition, offset, next_offset)])
        else:
            response.ack(error, partition, offset, next_offset, reason)
        ready.append(connection)

    @staticmethod
    def _on_done(route, last_request_id: int) -> None:
        pending = route.fire_and_forget
        while pending:
            request_id = next(iter(pending))
            if request_id > last_request_id:
                break
            pending.popitem(last=False)

    def worker_down(self, route) -> Outcome:
        """Fail everything in flight to a dead worker (after taking its last answers);
        returns what is left to do."""
        outcome = self.on_answers(route)
        route.up = False
        route.outbox.clear()
        route.outbox_bytes = 0
        acked, route.acked = route.acked, {}
        for connection, response, partition in acked.values():
            if not connection.closed:
                answer(response, ErrorCode.PARTITION_UNAVAILABLE, partition, -1, -1, "worker died")
                outcome.ready.append(connection)
        closing = set(route.fire_and_forget.values())
        route.fire_and_forget.clear()
        reason = f"worker {route.slot} died with this connection's produce in flight"
        outcome.to_close += [(connection, reason) for connection in closing]
        outcome.to_resume += self._unpause(route)
        if acked or closing:
            log.warning("worker %d died: %d acknowledged produces failed, %d connections closed",
                        route.slot, len(acked), len(closing))
        return outcome

    def worker_up(self, route) -> None:
        route.requests.attach_writer()
        route.answers.attach_reader(discard=True)
        route.up = True

    def forget(self, connection) -> None:
        """A closed connection: drop it from pause lists (in-flight entries expire on answer)."""
        for route in self.routes:
            route.paused.discard(connection)

    @property
    def in_flight(self) -> int:
        return sum(len(route.acked) + len(route.fire_and_forget) for route in self.routes)
