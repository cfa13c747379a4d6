"""The leader's side of the requests between brokers: a follower's REPLICA_FETCH and
LEADER_EPOCH_END, answered by the acceptor from the segment files like any fetch.

REPLICA_FETCH: per part, the leader epoch is checked against the one the owning
worker published (``SegmentFiles.leader_state``), bytes are read up to the log end
(not the high watermark: the follower is how the high watermark moves), never across
an epoch's end, and the part carries the high watermark, the log start and end and
the bytes' epoch. The fetch offsets are the follower's positions: they go to the
owning workers at once (``KIND_REPLICA_POSITIONS`` through the rings), where the
leader moves its high watermark and its ISR.

A fetch that finds nothing new in any part waits (``Parked``), up to its
``max_wait_ms``, holding its place in the connection's answer queue: the workers say
when a partition's log end or high watermark moved (``KIND_WAKE``), and a fetch whose
partitions have new bytes is answered then, so a follower gets a new set as soon as it
is appended, without polling. A high watermark that alone moved reaches the followers
with their next bytes or when their wait ends.

LEADER_EPOCH_END is answered from the partition's leader-epoch file.
"""

import collections

from mpbroker.codec import responses
from mpbroker.ipc import messages
from mpbroker.ownership import owner_slot
from mpbroker.segments.leader_epochs import UNDEFINED

MAX_WAIT_MS = 5000  # a follower may ask to wait at most this long
MAX_ANSWER_BYTES = 1 << 30  # the bytes of all parts of one answer together (its size is an int32)


class Parked:
    __slots__ = ("connection", "request", "response", "timer", "seen", "done")

    def __init__(self, connection, request, response, seen):
        self.connection = connection
        self.request = request
        self.response = response
        self.timer = None
        self.seen = seen  # (topic, partition) -> log end when parked
        self.done = False


class ReplicaRequests:
    def __init__(self, files, router, timers, ready):
        self._files = files
        self._router = router
        self._timers = timers
        self._ready = ready  # callable(connection): its answer became ready
        self._parked = collections.defaultdict(list)  # (topic, partition) -> [Parked]

    def fetch(self, connection, request) -> None:
        parts, has_data, seen = self._read(request, report=True)
        if has_data or request.max_wait_ms <= 0 or not request.parts:
            connection.respond(parts, len(request.parts))
            return
        self._release(parts)
        parked = Parked(connection, request, connection.reserve(), seen)
        for key in seen:
            self._parked[key].append(parked)
        parked.timer = self._timers.once(min(request.max_wait_ms, MAX_WAIT_MS),
                                         lambda _now: self._answer(parked, timed_out=True))

    def epoch_end(self, connection, request) -> None:
        error, view, state = self._files.leader_state(request.topic, request.partition, request.leader_epoch)
        if error:
            connection.respond([responses.leader_epoch_end_response(error, UNDEFINED, UNDEFINED)])
            return
        connection.respond([responses.leader_epoch_end_response(*self._files.epoch_end(view, state, request.epoch))])

    def wake(self, partitions) -> None:
        """The log end or high watermark of these partitions moved: answer the fetches
        parked on them whose view changed."""
        for key in partitions:
            waiting = self._parked.pop(key, None)
            if not waiting:
                continue
            for parked in waiting:
                if not parked.done:
                    self._answer(parked)

    def answer_all(self) -> None:
        """Answer every waiting fetch now (the acceptor is stopping)."""
        waiting = {id(parked): parked for entries in self._parked.values() for parked in entries}
        for parked in waiting.values():
            self._answer(parked, timed_out=True)

    # --- parts ------------------------------------------------------------------------

    def _report_positions(self, replica_id: int, positions: list) -> None:
        """Hand the follower's log ends to the owning workers, in records that fit their rings."""
        by_slot = {}
        routes = self._router.routes
        for topic, partition, leader_epoch, offset in positions:
            slot = owner_slot(topic, partition, len(routes))
            by_slot.setdefault(slot, []).append((topic.encode("ascii"), partition, leader_epoch, offset))
        for slot, found in by_slot.items():
            route = routes[slot]
            limit = route.requests.max_record_body - messages.POSITIONS_HEAD_BYTES
            batch, size = [], 0
            for position in found:
                entry_size = messages.position_bytes(position[0])
                if batch and (size + entry_size > limit or len(batch) == messages.MAX_POSITIONS):
                    self._router.notify(route, messages.KIND_REPLICA_POSITIONS,
                                        messages.encode_replica_positions(replica_id, batch))
                    batch, size = [], 0
                batch.append(position)
                size += entry_size
            if batch:
                self._router.notify(route, messages.KIND_REPLICA_POSITIONS,
                                    messages.encode_replica_positions(replica_id, batch))

    def _read(self, request, report: bool = False) -> tuple:
        """``(answer parts, any bytes or error?, {(topic, partition): what was seen})``;
        with ``report``, the positions of the parts led here go to their workers."""
        results = []
        has_data = False
        seen = {}
        positions = []
        room = MAX_ANSWER_BYTES  # for all parts' bytes: an answer's size is an int32
        for part in request.parts:
            error, view, state = self._files.leader_state(part.topic, part.partition, part.leader_epoch)
            if error:
                results.append((error, -1, -1, -1, UNDEFINED, None))
                has_data = True  # an error is news: the follower acts on it at once
                continue
            positions.append((part.topic, part.partition, part.leader_epoch, part.offset))
            max_size = min(max(part.max_size, 0), room)
            error, epoch, found = self._files.replica_fetch(view, state, part.offset, max_size)
            if found is not None:
                room -= found.length
            if error or found is not None:
                has_data = True
            seen[(part.topic, part.partition)] = state.log_end
            results.append((error, state.high_watermark, state.log_start, state.log_end, epoch, found))
        if report and positions:
            self._report_positions(request.replica_id, positions)
        parts = [responses.replica_fetch_header([found.length if found else 0 for *_, found in results])]
        for error, high_watermark, log_start, log_end, epoch, found in results:
            parts.append(responses.replica_part_header(error, high_watermark, log_start, log_end, epoch,
                                                       found.length if found else 0))
            if found is not None:
                found.file.acquire()  # held until sent (or the connection closes)
                parts.append(found)
        return parts, has_data, seen

    @staticmethod
    def _release(parts) -> None:
        for part in parts:
            if not isinstance(part, bytes):
                part.file.release()

    def _answer(self, parked: Parked, timed_out: bool = False) -> None:
        """Answer a parked fetch (woken with news, or out of time) with what there is."""
        if parked.done:
            return
        if parked.connection.closed:
            self._unpark(parked)
            return
        parts, has_data, seen = self._read(parked.request)
        if not timed_out and not has_data and seen == parked.seen:
            # Nothing new to copy (the high watermark alone moved, perhaps by this
            # very follower's report): it learns the new one with its next bytes, or
            # when the wait ends, as Kafka's followers do; answering now would double
            # the fetches per set.
            self._release(parts)
            for key in seen:
                if parked not in self._parked[key]:
                    self._parked[key].append(parked)
            return
        self._unpark(parked)
        parked.response.fill(parts)
        self._ready(parked.connection)

    def _unpark(self, parked: Parked) -> None:
        parked.done = True
        self._timers.cancel(parked.timer)
        for key in parked.seen:
            waiting = self._parked.get(key)
            if waiting and parked in waiting:
                waiting.remove(parked)
                if not waiting:
                    del self._parked[key]
