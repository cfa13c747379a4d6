"""What the acceptor does with each request type (PROTOCOL.md).

Fetch, MULTIFETCH and OFFSETS are answered here from the segment files. Produce
requests are checked (topic name, partition range; partition -1 picks one at random)
and routed to the owning worker; the worker validates the messages. A bad 0.7
produce closes the connection, as 0.7 did (so does one whose worker is down:
``ProduceRefused`` from the router); PRODUCE_ACKED gets an error code instead.

Answer sizes are int32 on the wire: a fetch sends at most ``MAX_ANSWER_PAYLOAD``
bytes, and a MULTIFETCH whose parts together would exceed that gets its later parts
shortened (to nothing, if need be), as a fetch may always answer with less than
asked for.
"""

import logging
import random
import time

from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode, InvalidTopicError, NotLeaderError
from mpbroker.codec.requests import (
    RANDOM_PARTITION,
    Durability,
    FetchRequest,
    LeaderEpochEndRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceRequest,
    ReplicaFetchRequest,
    decode_request,
    peek_produce,
)
from mpbroker.codec.topic_names import check_topic
from mpbroker.ipc.counters import REQUEST_KINDS, REQUESTS
from mpbroker.ipc.messages import Mode
from mpbroker.ipc.partition_table import Role
from mpbroker.ownership import owner_slot
from mpbroker.segments import topic_configs

log = logging.getLogger(__name__)

MAX_ANSWER_PAYLOAD = (1 << 31) - 1 - 2  # an answer's int32 size counts its 2-byte error code too
_MODE_BY_DURABILITY = {Durability.APPEND: Mode.ACK_APPEND, Durability.FLUSH: Mode.ACK_FLUSH,
                       Durability.REPLICATED: Mode.ACK_REPLICATED}
_PRODUCE_COUNTER = REQUESTS + REQUEST_KINDS.index("produce")
_COUNTER_BY_KIND = {
    kind: REQUESTS + REQUEST_KINDS.index(name) for kind, name in (
        (ProduceRequest, "produce"), (FetchRequest, "fetch"), (MultiFetchRequest, "multifetch"),
        (MultiProduceRequest, "multiproduce"), (OffsetsRequest, "offsets"), (ProduceAckedRequest, "produce_acked"))
}


AUTO_CREATE_RETRY_S = 5.0  # ask the registrar to create a topic again after this long


class TopicBeingDeleted(ValueError):
    """A produce to a topic whose deletion is under way (``topic_deletion``): refused
    as one to a partition that does not exist."""


class RequestHandlers:
    def __init__(self, config, segment_files, router, on_close, counters, replica_requests, create_topic=None):
        self.config = config
        # callable(topic, partitions, record_batches): ask the registrar for a replicated topic
        self._create_topic = create_topic
        self._creating = {}  # topic -> time.monotonic() it was asked for
        self.replicated = {}  # replicated topic -> partition count (the registrar's, via the supervisor)
        # Until the first ``roles`` message (a broker just started, with ZooKeeper), which
        # topics are replicated is not known: see ``roles_unknown_for``.
        self.roles_known = not config.enable_zookeeper
        self._replica = replica_requests
        self._counters = counters  # the acceptor's CounterTable row
        self._files = segment_files
        self._router = router
        self._close = on_close  # callable(connection, reason)
        self._topics = {}  # checked topic name -> its ASCII bytes
        self._routes = {}  # (checked topic bytes, partition in range) -> WorkerRoute
        self._created_counts = {}  # topic -> partitions it was created with by a modern client (0: none)
        self.deleting = set()  # topics being deleted: nothing is routed to them

    def handle(self, connection, frame) -> None:
        """Answer or route one request; MalformedRequestError and ProduceRefused
        propagate (the caller closes the connection).

        The hot path: a 0.7 PRODUCE to a (topic, partition) routed before goes on as
        ``peek_produce`` read it, topic and route from the caches. Anything else (first
        sight, partition -1, anything malformed) is decoded in full, which also names
        the precise error."""
        produce = peek_produce(frame)
        if produce is not None:
            topic_bytes, partition, set_start = produce
            route = self._routes.get((topic_bytes, partition))
            if route is not None:
                self._counters[_PRODUCE_COUNTER] += 1  # before routing: a refused produce is counted too
                self._router.produce(connection, topic_bytes, partition, Mode.FIRE_AND_FORGET,
                                     memoryview(frame)[set_start:], route)
                return
        request = decode_request(frame)
        kind = type(request)
        if kind is ReplicaFetchRequest:
            self._replica.fetch(connection, request)
            return
        if kind is LeaderEpochEndRequest:
            self._replica.epoch_end(connection, request)
            return
        self._counters[_COUNTER_BY_KIND[kind]] += 1
        if kind is ProduceRequest:
            self._produce(connection, request.topic, request.partition, request.message_set)
        elif kind is FetchRequest:
            connection.respond(self._fetch_parts(request))
        elif kind is ProduceAckedRequest:
            self._produce_acked(connection, request)
        elif kind is MultiFetchRequest:
            connection.respond(self._multifetch_parts(request.fetches), len(request.fetches))
        elif kind is OffsetsRequest:
            connection.respond([self._offsets(request)])
        elif kind is MultiProduceRequest:
            self._multiproduce(connection, request.produces)

    # --- produce ----------------------------------------------------------------

    def set_replicated(self, topics: dict) -> None:
        """The replicated topics changed: no route of theirs stays cached (the fast path
        would skip the leader check)."""
        self.replicated = topics
        self.roles_known = True
        self._routes = {key: route for key, route in self._routes.items()
                        if key[0].decode("ascii") not in topics}

    def partition_count(self, topic: str) -> int:
        """A replicated topic's count (the controller's), else the count a modern client
        created it with (``segments.topic_configs``), else the configuration's."""
        count = self.replicated.get(topic)
        if count is not None:
            return count
        count = self._created_counts.get(topic)
        if count is None:
            found = topic_configs.read(self.config.log_dir, topic)
            count = found["partitions"] if found and isinstance(found.get("partitions"), int) else 0
            if len(self._created_counts) > 100_000:
                self._created_counts.clear()
            self._created_counts[topic] = count
        return count or self.config.partitions_for(topic)

    def topic_created(self, topic: str, partitions: int) -> None:
        """A modern client created ``topic`` with ``partitions`` (its file is written)."""
        self._created_counts[topic] = partitions

    def was_created(self, topic: str) -> bool:
        """Whether a modern client created ``topic`` (CreateTopics): its count is kept."""
        return self.partition_count(topic) > 0 and self._created_counts.get(topic, 0) > 0

    def created_topics(self) -> list:
        """The topics modern clients created through this acceptor (their logs may be a
        moment from being published)."""
        return [topic for topic, count in self._created_counts.items() if count]

    def target(self, topic: str, partition: int, record_batches: bool = False):
        """``(topic bytes, partition, route)`` or raise InvalidTopicError / ValueError /
        NotLeaderError (a replicated partition this broker does not lead now).
        ``record_batches``: a modern client's (a topic it makes holds record batches)."""
        topic_bytes = self._topics.get(topic)
        if topic_bytes is None:
            topic_bytes = check_topic(topic).encode("ascii")
            if len(self._topics) < 100_000:
                self._topics[topic] = topic_bytes
        if self.roles_unknown_for(topic):
            raise NotLeaderError(f"topic {topic!r} has leader epochs and this broker has not read its roles yet")
        if self.deleting and topic in self.deleting:
            raise TopicBeingDeleted(f"topic {topic!r} is being deleted")
        count = self.partition_count(topic)
        if partition == RANDOM_PARTITION:
            partition = random.randrange(count)
        elif not 0 <= partition < count:
            raise ValueError(f"partition {partition} of topic {topic!r} is outside [0, {count})")
        if topic in self.replicated:  # checked at every produce; the worker checks again
            if self._files.role(topic, partition) != Role.LEADER:
                raise NotLeaderError(f"this broker does not lead {topic}-{partition}")
            return topic_bytes, partition, self._router.routes[owner_slot(topic, partition, len(self._router.routes))]
        if self._auto_replicated(topic, record_batches):
            raise NotLeaderError(f"topic {topic!r} is being created with replicas: no leader yet")
        route = self._routes.get((topic_bytes, partition))
        if route is None:
            route = self._router.routes[owner_slot(topic, partition, len(self._router.routes))]
            if len(self._routes) < 1_000_000:
                self._routes[(topic_bytes, partition)] = route
        return topic_bytes, partition, route

    def begin_deletion(self, topic: str) -> None:
        """Route nothing more to ``topic`` (its deletion begins): the fast path's cached
        routes go too."""
        self.deleting.add(topic)
        self._routes = {key: route for key, route in self._routes.items() if key[0].decode("ascii") != topic}
        self._created_counts.pop(topic, None)

    def end_deletion(self, topic: str) -> None:
        """``topic`` is gone: a produce may make it anew (auto-creation), from nothing."""
        self.deleting.discard(topic)
        self._created_counts.pop(topic, None)
        self._creating.pop(topic, None)
        self._files.forget_topic(topic)

    def ask_to_create(self, topic: str, partitions: int, **fields) -> None:
        """Ask the registrar (through the supervisor) to create ``topic`` replicated."""
        if self._create_topic is not None:
            self._create_topic(topic, partitions, **fields)

    def roles_unknown_for(self, topic: str) -> bool:
        """Before the registrar's first ``roles`` (a broker just started, with ZooKeeper),
        which topics are replicated is not known. A topic with leader epochs on disk
        in any partition was replicated: until the roles come it is served as a
        replicated topic this broker does not lead (NOT_LEADER), so that a former
        leader neither takes produces the 0.7 way (acknowledged with no replica) nor
        serves bytes past the high watermark in the moment after its restart. Checked
        before the partition range: the topic's partition count comes with the roles."""
        return not self.roles_known and self._files.topic_has_leader_epochs(topic)

    def _auto_replicated(self, topic: str, record_batches: bool = False) -> bool:
        """A produce to a topic no worker has, on a broker that creates topics with
        replicas (``default.replication.factor`` > 1, ZooKeeper): the registrar is asked
        to create it (at most every AUTO_CREATE_RETRY_S; in the record-batch format for a
        modern client), and it is not created here."""
        if (self._create_topic is None or self.config.default_replication_factor <= 1
                or self._files.knows_topic(topic)):
            return False
        now = time.monotonic()
        if now - self._creating.get(topic, -AUTO_CREATE_RETRY_S) >= AUTO_CREATE_RETRY_S:
            if len(self._creating) > 10_000:
                self._creating.clear()
            self._creating[topic] = now
            self._create_topic(topic, self.config.partitions_for(topic), record_batches=record_batches)
        return True

    def _produce(self, connection, topic: str, partition: int, message_set) -> None:
        try:
            topic_bytes, partition, route = self.target(topic, partition)
        except (InvalidTopicError, ValueError, NotLeaderError) as exc:
            self._close(connection, f"bad produce request: {exc}")
            return
        self._router.produce(connection, topic_bytes, partition, Mode.FIRE_AND_FORGET, message_set, route)

    def _multiproduce(self, connection, produces) -> None:
        targets = []
        for produce in produces:  # check every target before routing any
            try:
                targets.append((self.target(produce.topic, produce.partition), produce.message_set))
            except (InvalidTopicError, ValueError, NotLeaderError) as exc:
                self._close(connection, f"bad multiproduce request: {exc}")
                return
        for (topic_bytes, partition, route), message_set in targets:  # ProduceRefused stops it (and closes)
            self._router.produce(connection, topic_bytes, partition, Mode.FIRE_AND_FORGET, message_set, route)

    def _produce_acked(self, connection, request) -> None:
        response = connection.reserve()
        try:
            topic_bytes, partition, route = self.target(request.topic, request.partition)
        except InvalidTopicError as exc:
            log.info("%r: %s", connection, exc)
            response.fill([responses.produce_ack_response(ErrorCode.INVALID_TOPIC, request.partition, -1, -1)])
            return
        except ValueError:
            response.fill([responses.produce_ack_response(ErrorCode.WRONG_PARTITION, request.partition, -1, -1)])
            return
        except NotLeaderError:
            response.fill([responses.produce_ack_response(ErrorCode.NOT_LEADER, request.partition, -1, -1)])
            return
        self._router.produce(connection, topic_bytes, partition, _MODE_BY_DURABILITY[request.durability],
                             request.message_set, route, response)

    # --- reads ------------------------------------------------------------------

    def _read_range(self, topic: str, partition: int, offset: int, max_size: int):
        """``(error, FileRange or None)`` for one fetch."""
        if self.roles_unknown_for(topic):
            return ErrorCode.NOT_LEADER, None
        if not 0 <= partition < self.partition_count(topic):
            return ErrorCode.WRONG_PARTITION, None
        if topic in self.replicated and self._files.role(topic, partition) != Role.LEADER:
            return ErrorCode.NOT_LEADER, None  # (also while a respawned worker has not had its roles yet)
        return self._files.fetch(topic, partition, offset, max_size)

    def _fetch_parts(self, request) -> list:
        max_size = request.max_size
        if max_size > MAX_ANSWER_PAYLOAD:
            max_size = MAX_ANSWER_PAYLOAD
        error, found = self._read_range(request.topic, request.partition, request.offset, max_size)
        if found is None:
            return [responses.error_response(error)]
        return [responses.response_header(error, found.length), _held(found)]

    def _multifetch_parts(self, fetches) -> list:
        room = MAX_ANSWER_PAYLOAD - responses.ERROR_HEADER_BYTES * len(fetches)  # for all parts' message bytes
        results = []
        for fetch in fetches:
            max_size = fetch.max_size if fetch.max_size < room else room
            error, found = self._read_range(fetch.topic, fetch.partition, fetch.offset, max_size)
            if found is not None:
                room -= found.length
            results.append((error, found))
        parts = [responses.multifetch_header([found.length if found else 0 for _, found in results])]
        for error, found in results:  # every part read: no reference is taken before one could fail
            if found is None:
                parts.append(responses.error_response(error))
            else:
                parts.append(responses.response_header(error, found.length))
                parts.append(_held(found))
        return parts

    def _offsets(self, request) -> bytes:
        if self.roles_unknown_for(request.topic):
            return responses.offsets_response(ErrorCode.NOT_LEADER, [])
        if not 0 <= request.partition < self.partition_count(request.topic):
            return responses.offsets_response(ErrorCode.WRONG_PARTITION, [])
        if request.topic in self.replicated and self._files.role(request.topic, request.partition) != Role.LEADER:
            return responses.offsets_response(ErrorCode.NOT_LEADER, [])
        error, offsets = self._files.offsets(request.topic, request.partition, request.time, request.max_offsets)
        return responses.offsets_response(error, offsets)


def _held(found):
    """A fetched FileRange as a part of an answer: it holds a reference on its segment
    file until the connection has sent it (or closed)."""
    found.file.acquire()
    return found
