"""The driver's half of the ``mpbroker`` Spark source: which partitions there are, where
each log starts and ends, and how far one micro-batch reads.

Each call of ``log_ends`` discovers the partitions anew (``plan.discover``: ZooKeeper or
the broker list; new topics of a pattern and new partitions appear, and start at their
earliest offset) and asks each broker (a replicated topic: its leader of the moment) for
the ends of its logs. A broker that cannot be reached is logged and its partitions keep
their offsets for this trigger: a 0.7 broker going away is not data lost, its partitions
are read again once it is back.

A read limit cuts a partition's range at a message boundary: with byte offsets there is
no arithmetic for "N bytes or N messages further", so ``cut_point`` fetches from the
range's start (up to the cap, on this driver) and takes the last whole message within
it. That reads the capped part twice (here and in the executor), the price of a limit;
without one (``ReadAllAvailable``: availableNow, or no limit option) the log end is the
end and nothing is fetched here. The budget is shared between partitions in proportion
to their backlog, as Spark's Kafka source shares ``maxOffsetsPerTrigger``.

A stored offset outside its log (retention deleted what the query had not read, or the
log was recreated) is data loss: ``DataLossError`` unless ``failOnDataLoss`` is false,
when the partition restarts at its earliest offset and a warning says what was skipped.
"""

import contextlib
import logging

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.offset_times import start_offset_for_time
from mpbroker.clients.consumer.simple_consumer import LATEST_TIME, MAX_SEGMENT_OFFSETS, SimpleConsumer
from mpbroker.clients.core.errors import BrokerUnavailableError, NotAMessageBoundaryError
from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.codec.errors import MPBrokerError
from mpbroker.spark_loader.plan import LoadSource, PartitionRange, discover
from mpbroker.spark_loader.source.offsets import EARLIEST, LATEST, DataLossError, flatten, nest, node_name

log = logging.getLogger(__name__)

MIN_CUT_FETCH = 64 * 1024


class LogEnds(dict):
    """``{(topic, node): PartitionRange}`` with start = the earliest offset and end = the
    log end, as read now; ``unreachable`` lists the partitions that could not be asked."""

    unreachable: tuple = ()


class Planner:
    def __init__(self, options):
        self.options = options
        self._leaders = None  # a LeaderConsumer, for replicated topics (ZooKeeper only)
        self._assign_checked = False  # assign's partitions exist (checked once: later, a broker may be down)

    # --- discovery and log ends ---------------------------------------------------

    def discover(self) -> LoadSource:
        options = self.options
        topics = options.topics or tuple(dict.fromkeys(topic for topic, _ in options.assign))
        source = discover(broker_list=options.brokers, zookeeper=options.zookeeper, topics=topics,
                          whitelist=options.pattern, zk_timeout_ms=options.zk_timeout_ms, skip_unreachable=True)
        if not options.assign:
            return source
        found = {(topic, node_name(broker_id, partition)) for topic, broker_id, partition in source.partitions}
        missing = [f"{topic}/{node}" for topic, node in options.assign if (topic, node) not in found]
        if missing and not self._assign_checked:
            known = ", ".join(sorted(f"{t}/{n}" for t, n in found)) or "none"
            raise ValueError(f"mpbroker source: assign names partitions that do not exist: {', '.join(missing)} "
                             f"(known: {known}; a 0.7 topic's partitions are <broker>-<partition>, a replicated "
                             "topic's <partition>)")
        self._assign_checked = True
        wanted = set(options.assign)
        return source._replace(partitions=[p for p in source.partitions
                                           if (p[0], node_name(p[1], p[2])) in wanted])

    def log_ends(self) -> LogEnds:
        source = self.discover()
        ends, unreachable = LogEnds(), []
        by_broker = {}
        for topic, broker_id, partition in source.partitions:
            by_broker.setdefault(broker_id, []).append((topic, partition))
        for broker_id, partitions in sorted(by_broker.items()):
            if broker_id == REPLICATED:
                leaders = self.leaders(source.zookeeper)
                for topic, partition in sorted(partitions):
                    ends[(topic, str(partition))] = leaders.call(topic, partition, lambda consumer: _range(
                        consumer, topic, REPLICATED, partition, source.zookeeper))
                continue
            host, port = source.brokers[broker_id]
            try:
                with SimpleConsumer(host, port, connect_timeout_ms=self.options.zk_timeout_ms) as consumer:
                    for topic, partition in sorted(partitions):
                        ends[(topic, node_name(broker_id, partition))] = _range(consumer, topic, broker_id,
                                                                               partition)
            except BrokerUnavailableError as exc:
                log.warning("broker %d (%s:%d) cannot be reached (%s): its partitions are not read this time",
                            broker_id, host, port, exc)
                unreachable += [(topic, node_name(broker_id, partition)) for topic, partition in partitions]
        ends.unreachable = tuple(unreachable)
        return ends

    def leaders(self, zookeeper: str) -> LeaderConsumer:
        if self._leaders is None:
            self._leaders = LeaderConsumer(zookeeper, zk_connectiontimeout_ms=self.options.zk_timeout_ms)
        return self._leaders

    @contextlib.contextmanager
    def consumer(self, part: PartitionRange, fetch_size: int = 1024 * 1024):
        """A consumer of ``part``'s log: its broker's, or the partition leader's."""
        if part.broker_id == REPLICATED:
            yield self.leaders(part.zookeeper)
            return
        with SimpleConsumer(part.host, part.port, fetch_size=fetch_size,
                            max_fetch_size=max(fetch_size, 64 * 1024 * 1024)) as consumer:
            yield consumer

    def close(self) -> None:
        if self._leaders is not None:
            self._leaders.close()
            self._leaders = None

    # --- offsets ---------------------------------------------------------------------

    def starting_offsets(self, ends: LogEnds | None = None) -> dict:
        """The offsets a query starts at: ``startingOffsets`` or ``startingTimestamp``
        resolved against the logs now (a JSON offset is checked: inside the log, at a
        message boundary)."""
        options = self.options
        ends = self.log_ends() if ends is None else ends
        starting = options.starting
        given = flatten(starting) if isinstance(starting, dict) else {}
        unknown = sorted(set(given) - set(ends) - set(ends.unreachable))
        if unknown:
            raise ValueError("mpbroker source: startingOffsets names partitions that do not exist: "
                             + ", ".join(f"{t}/{n}" for t, n in unknown))
        offsets = {}
        for key, part in sorted(ends.items()):
            if options.starting_timestamp >= 0:
                with self.consumer(part) as consumer:
                    offsets[key] = start_offset_for_time(consumer, part.topic, part.partition,
                                                         options.starting_timestamp)
                continue
            wanted = given.get(key, starting if not isinstance(starting, dict) else EARLIEST)
            if wanted == EARLIEST:
                offsets[key] = part.start
            elif wanted == LATEST:
                offsets[key] = part.end
            else:
                offsets[key] = self.check_boundary(part, wanted)
        return nest(offsets)

    def check_boundary(self, part: PartitionRange, offset: int) -> int:
        where = f"{part.topic}/{node_name(part.broker_id, part.partition)}"
        if not part.start <= offset <= part.end:
            raise ValueError(f"mpbroker source: startingOffsets {where}: offset {offset} is outside the log "
                             f"({part.start}..{part.end})")
        if offset < part.end:
            with self.consumer(part, MIN_CUT_FETCH) as consumer:
                try:
                    consumer.fetch(part.topic, part.partition, offset, MIN_CUT_FETCH)
                except NotAMessageBoundaryError as exc:
                    raise ValueError(f"mpbroker source: startingOffsets {where}: offset {offset} is inside a "
                                     f"message; the message starts at {exc.nearest}") from None
                except MPBrokerError as exc:
                    raise ValueError(f"mpbroker source: startingOffsets {where}: no message can be read at "
                                     f"offset {offset}: {exc}") from None
        return offset

    def checked_start(self, key: tuple, start: int, part: PartitionRange) -> int:
        """``start`` if the log still holds it, else (data lost) the earliest offset or
        DataLossError."""
        if part.start <= start <= part.end:
            return start
        what = (f"offset {start} of {key[0]}/{key[1]} is no longer in the log, which now holds "
                f"{part.start}..{part.end}: ")
        what += ("data before the log start was deleted (retention) before this query read it"
                 if start < part.start else "the log was truncated or recreated")
        if self.options.fail_on_data_loss:
            raise DataLossError(f"mpbroker source: {what}. Set failOnDataLoss=false to go on from the earliest "
                                "offset (what is gone is skipped and logged)")
        log.warning("mpbroker source: %s; going on at %d (failOnDataLoss=false)", what, part.start)
        return part.start

    def end_offsets(self, start: dict, ends: LogEnds, max_bytes: int = 0, max_messages: int = 0) -> dict:
        """The end of the next batch from ``start``: the log ends, cut by the limits."""
        start = flatten(start)
        begin, end = {}, {}
        for key, offset in start.items():
            if key not in ends:  # not discovered now (its broker is down or unregistered): nothing read
                begin[key] = end[key] = offset
        for key, part in ends.items():
            begin[key] = self.checked_start(key, start[key], part) if key in start else part.start
            end[key] = part.end
        if max_bytes or max_messages:
            self._apply_limits(begin, end, ends, max_bytes, max_messages)
        return nest(end)

    def _apply_limits(self, begin: dict, end: dict, ends: LogEnds, max_bytes: int, max_messages: int) -> None:
        backlog = {key: end[key] - begin[key] for key in sorted(ends) if end[key] > begin[key]}
        total = sum(backlog.values())
        if not total:
            return
        bytes_caps = shares(max_bytes, backlog) if max_bytes and max_bytes < total else {}
        messages_caps = shares(max_messages, backlog) if max_messages else {}
        for key in backlog:
            bytes_cap, messages_cap = bytes_caps.get(key, 0), messages_caps.get(key, 0)
            if not bytes_cap and not messages_cap:
                continue
            part = ends[key]
            fetch_size = min(max(bytes_cap or 1024 * 1024, MIN_CUT_FETCH), self.options.fetch_size)
            with self.consumer(part, fetch_size) as consumer:
                end[key] = cut_point(consumer, part.topic, part.partition, begin[key], end[key], bytes_cap,
                                     messages_cap)

    # --- Spark partitions -------------------------------------------------------------

    def ranges(self, start: dict, end: dict, ends: LogEnds | None = None) -> list:
        """One PartitionRange per partition with something to read between ``start`` and
        ``end`` (``ends`` gives the brokers' addresses; discovered now if None), split at
        segment bases until there are ``minPartitions``."""
        start, end = flatten(start), flatten(end)
        todo = {key: (start.get(key, offset), offset) for key, offset in end.items() if start.get(key, offset) < offset}
        if not todo:
            return []
        if ends is None or any(key not in ends for key in todo):  # (a key missing: discovered since?)
            ends = self.log_ends()
        ranges = []
        for key, (first, last) in sorted(todo.items()):
            part = ends.get(key)
            if part is None:
                raise RuntimeError(f"mpbroker source: {key[0]}/{key[1]} cannot be found now (its broker is down or "
                                   f"not registered, or the topic was deleted): offsets {first}..{last} of it, "
                                   "planned before, cannot be read; the query can be restarted once it is back")
            ranges.append(part._replace(start=first, end=last))
        if self.options.min_partitions > len(ranges):
            ranges = self._split(ranges, self.options.min_partitions)
        return ranges

    def _split(self, ranges: list, wanted: int) -> list:
        """Split the ranges at segment bases (message boundaries the broker lists without
        reading), the largest first, until there are ``wanted`` or none can be split."""
        pieces = []
        for part in ranges:
            with self.consumer(part) as consumer:
                bases = consumer.get_offsets_before(part.topic, part.partition, LATEST_TIME, MAX_SEGMENT_OFFSETS)
            cuts = sorted(base for base in set(bases) if part.start < base < part.end)
            pieces.append((part, cuts))
        result = [part for part, _ in pieces]
        while len(result) < wanted:
            splittable = [(part.end - part.start, index) for index, part in enumerate(result)
                          if _inner(part, pieces)]
            if not splittable:
                break
            _, index = max(splittable)
            part = result.pop(index)
            inner = _inner(part, pieces)
            middle = min(inner, key=lambda base: abs(base - (part.start + part.end) / 2))
            result[index:index] = [part._replace(end=middle), part._replace(start=middle)]
        return result


def shares(budget: int, backlog: dict) -> dict:
    """``budget`` split over the keys of ``backlog`` in proportion to it, summing to
    ``budget`` (largest remainders get the rest), each at least 1."""
    total = sum(backlog.values())
    exact = {key: budget * pending / total for key, pending in backlog.items()}
    result = {key: int(value) for key, value in exact.items()}
    for key in sorted(exact, key=lambda k: result[k] - exact[k])[:budget - sum(result.values())]:
        result[key] += 1
    return {key: max(1, value) for key, value in result.items()}


def _inner(part: PartitionRange, pieces: list) -> list:
    for original, cuts in pieces:
        if (original.topic, original.broker_id, original.partition) == (part.topic, part.broker_id, part.partition):
            return [base for base in cuts if part.start < base < part.end]
    return []


def _range(consumer, topic: str, broker_id: int, partition: int, zookeeper: str = "") -> PartitionRange:
    earliest = consumer.earliest_offset(topic, partition)
    latest = consumer.latest_offset(topic, partition)
    return PartitionRange(topic, broker_id, consumer.host, consumer.port, partition, earliest, latest, -1, -1,
                          zookeeper)


def cut_point(consumer, topic: str, partition: int, start: int, end: int, max_bytes: int = 0,
              max_messages: int = 0) -> int:
    """The furthest message boundary ``b``, ``start < b <= end``, such that ``[start, b)``
    holds at most ``max_bytes`` bytes and ``max_messages`` messages (0: no such cap), but
    at least one message (or compressed set) even if that alone is over the caps."""
    cut, taken = start, 0
    sets = consumer.message_sets(topic, partition, start)
    try:
        for message_set in sets:
            for next_offset in message_set.next_offsets:
                if next_offset > end or (max_bytes and next_offset - start > max_bytes and cut > start):
                    return cut
                taken += 1
                cut = max(cut, next_offset)  # a compressed set's messages but its last end where it starts
                if cut > start and ((max_messages and taken >= max_messages) or cut == end):
                    return cut
    finally:
        sets.close()
    return cut

