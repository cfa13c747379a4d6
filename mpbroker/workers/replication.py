"""Replication in the worker that owns a partition: its role, the leader's high
watermark and ISR, durability-2 acknowledgements, and what a follower does with the
bytes it fetched (Kafka 0.8's ``Partition`` and ``ReplicaManager``, per worker).

Roles come from the registrar (via the supervisor) as ``roles`` entries. A partition
without an entry is unreplicated and keeps the 0.7 rules; one with an entry has its log
created, when its first entry comes, in the topic's format (``record_batches``: modern
record batches, else 0.7 messages; a log found in the other format takes no role), and
is:

- **leader** (this broker, at a leader epoch): it records the epoch's start in the
  log (``Log.assign_epoch``), takes produces while the registrar's ZooKeeper lease
  holds (``SlotTable.lease``: never after the session may have expired), learns each
  follower's log end from its fetches (``positions``: the acceptor relays them) and
  advances the **high watermark** to the smallest log end of the ISR. Readers see
  bytes below it (the acceptor reads it from the partition table); durability-2
  produces are answered once it covers them. A follower more than
  ``replica.lag.time.max.ms`` behind leaves the ISR, one that caught up with the high
  watermark joins it again: the leader asks the registrar to write the ISR
  (``isr_change``, conditional on the state's version) and uses the new ISR only once
  it comes back in a ``roles`` entry, so an acknowledgement never counts on an ISR
  ZooKeeper does not have (a controller elects only from ZooKeeper's ISR).
- **follower**: ``replica_fetcher`` copies the leader's bytes; first it truncates the
  log where it diverges from the leader's (the end of its latest epoch in the
  leader's log, KIP-101/279), never to its own high watermark.
- **offline**: a replica here, with no leader now: no produces, no reads.

Produces to a partition not led here are refused with NOT_LEADER (a fire-and-forget
one closes its connection), durability 2 with an ISR smaller than
``min.insync.replicas`` with NOT_ENOUGH_REPLICAS, before anything is appended.
"""

import logging
from collections import deque
from typing import NamedTuple

from mpbroker.clock import monotonic_ms
from mpbroker.codec.errors import ErrorCode, MPBrokerError
from mpbroker.ipc import counters, messages
from mpbroker.ipc.messages import Mode
from mpbroker.ipc.partition_table import Role, TableFullError, isr_slots

log = logging.getLogger(__name__)

ISR_REQUEST_RETRY_MS = 5000  # ask for an ISR change again if the registrar has not answered by then


def _format_name(record_batches: bool) -> str:
    return "record batches" if record_batches else "0.7 messages"


class Waiter(NamedTuple):
    next_offset: int
    request_id: int
    partition: int
    offset: int


class FollowerPosition:
    __slots__ = ("log_end", "caught_up_ms", "leader_end_at_fetch", "fetch_ms")

    def __init__(self, now_ms: int):
        self.log_end = -1  # not known until it fetches
        self.caught_up_ms = now_ms  # a new leader gives every follower a full lag time
        self.leader_end_at_fetch = 0
        self.fetch_ms = now_ms


class Replica:
    """One replicated partition's state on this broker."""

    def __init__(self, partition_log):
        self.log = partition_log
        self.topic = partition_log.topic
        self.partition = partition_log.partition
        self.role = Role.OFFLINE
        self.leader = -1
        self.leader_epoch = -1
        self.epoch_start = 0
        self.isr = ()
        self.replicas = ()
        self.version = -1  # the state node's version the role was read at
        self.address = None  # the leader's (host, port) while following
        self.high_watermark = 0
        self.followers = {}  # broker id -> FollowerPosition (leader only)
        # durability-2 produces waiting for the high watermark (leader only), in log order:
        # each was appended after the one before it, so they are answered from the left
        self.waiters = deque()
        self.isr_requested_ms = None  # an ISR change was asked for at this time, not yet seen
        self.isr_requested = ()  # ... and the ISR asked for: its new members count for the high watermark
        self.needs_truncation = False  # follower: ask the leader where our epoch ended first

    def table_fields(self) -> tuple:
        """role, leader, leader_epoch, epoch_start, high_watermark, replica count, isr slots."""
        return (self.role, self.leader, self.leader_epoch, self.epoch_start, self.high_watermark,
                len(self.replicas), isr_slots(self.isr))


class ReplicaManager:
    def __init__(self, broker_id: int, logs, publisher, config, answer, request_isr, lease, counter_row=None,
                 roles_seq=lambda: 0, request_flush=lambda partition_log: None):
        self.broker_id = broker_id
        self._roles_seq = roles_seq  # callable(): the number of the registrar's last roles message
        self.applied_seq = 0  # the number of the last roles message applied here
        self._counters = counter_row  # the worker's CounterTable row: ISR shrinks and expands
        self._logs = logs
        self._publisher = publisher
        self.config = config  # replaced on reload
        self._answer = answer  # callable(kind, parts): a record for the acceptor
        self._request_isr = request_isr  # callable(**fields): an isr_change to the supervisor
        self._request_flush = request_flush  # callable(log): flush it now, ``flushed`` follows
        self._lease = lease  # callable() -> monotonic ms until which the ZooKeeper session holds
        self.replicas = {}  # (topic, partition) -> Replica
        self.by_log = publisher.replicas  # Log -> Replica: the publisher writes their fields
        self._woken = set()  # (topic, partition) whose log end or high watermark moved
        self.fetcher = None  # the ReplicaFetcher (set by the worker)

    # --- roles ---------------------------------------------------------------------

    def apply_roles(self, entries) -> None:
        for entry in entries:
            key = (entry["topic"], entry["partition"])
            try:
                self._apply_entry(key, entry)
            except (MPBrokerError, TableFullError, OSError, ValueError) as exc:
                # This partition stays (or goes) offline here; the others are served.
                log.error("%s-%d: cannot take the role %s: %s", *key, entry.get("role"), exc)
                replica = self.replicas.get(key)
                if replica is not None:
                    self._stop_leading(replica, f"its log failed: {exc}")
                    self._set_role(replica, Role.OFFLINE)
                    self._publisher.publish(replica.log)

    def _apply_entry(self, key: tuple, entry: dict) -> None:
        replica = self.replicas.get(key)
        if entry["role"] == "none":
            if replica is not None:
                self._stop_leading(replica, "no longer a replica here")
                self._set_role(replica, Role.OFFLINE)
                self._publisher.publish(replica.log)
            return
        if replica is None:
            record_batches = bool(entry.get("record_batches", False))  # the topic's format, from its assignment
            partition_log = self._logs.get(*key)
            if partition_log is None:
                partition_log = self._logs.get_or_create(*key, record_batches)
                self._publisher.add(partition_log)
            if partition_log.record_batches != record_batches:
                # A log made before the assignment (a produce's, in the other format): the
                # leader's bytes cannot go into it, nor produces of the topic's format.
                raise ValueError(f"its log holds {_format_name(partition_log.record_batches)}, the topic's "
                                 f"assignment says {_format_name(record_batches)}")
            # On disk before any byte comes: a restart before the next roles must not
            # take the topic for an unreplicated one (``roles_unknown_for``).
            partition_log.leader_epochs.write_if_missing()
            replica = Replica(partition_log)
            # A respawned worker: what its predecessor published (the table outlives it).
            previous = self._publisher.previous(partition_log)
            if previous is not None and previous.role in (Role.LEADER, Role.FOLLOWER):
                replica.high_watermark = min(previous.high_watermark, partition_log.log_end)
            self.replicas[key] = replica
            self.by_log[partition_log] = replica
        self._apply(replica, entry)

    def _apply(self, replica: Replica, entry: dict) -> None:
        epoch = entry["leader_epoch"]
        if epoch < replica.leader_epoch:
            return  # older than what we act under (a late message)
        replica.replicas = tuple(entry["replicas"])
        role = entry["role"]
        new_epoch = epoch != replica.leader_epoch
        if role == "leader" and replica.role == Role.LEADER and set(entry["isr"]) != set(replica.isr):
            self._count_isr_change(replica.isr, entry["isr"])
        if role == "leader":
            if new_epoch or replica.role != Role.LEADER:
                self._become_leader(replica, epoch, tuple(entry["isr"]))
            elif tuple(entry["isr"]) != replica.isr:
                log.info("%s-%d: ISR %s -> %s", replica.topic, replica.partition, list(replica.isr), entry["isr"])
                replica.isr = tuple(entry["isr"])
            replica.isr_requested_ms = None
            replica.isr_requested = ()
            replica.version = entry["version"]
            if self._alone(replica) and replica.log.flushed_end < replica.high_watermark:
                # The controller left the leader alone (its followers' sessions ended):
                # what readers saw is now on no other ISR member, so it goes to disk now.
                self._request_flush(replica.log)
            self._advance_high_watermark(replica)
        elif role == "follower":
            address = (entry["host"], entry["port"])
            if new_epoch or replica.role != Role.FOLLOWER or address != replica.address:
                self._become_follower(replica, epoch, entry["leader"], address)
            replica.isr = tuple(entry["isr"])
            replica.version = entry["version"]
        else:
            self._stop_leading(replica, "the partition has no leader")
            replica.leader_epoch = epoch
            replica.leader = -1
            replica.isr = tuple(entry["isr"])
            replica.version = entry["version"]
            self._set_role(replica, Role.OFFLINE)
        self._publisher.publish(replica.log)

    def _count_isr_change(self, before, after) -> None:
        if self._counters is not None:
            self._counters[counters.ISR_SHRINKS if set(before) - set(after) else counters.ISR_EXPANDS] += 1

    def _become_leader(self, replica: Replica, epoch: int, isr: tuple) -> None:
        partition_log = replica.log
        if self.fetcher is not None:
            self.fetcher.remove(replica)
        partition_log.assign_epoch(epoch)  # durable before any set is appended under it
        replica.leader_epoch = epoch
        replica.epoch_start = partition_log.leader_epochs.latest.start_offset
        replica.leader = self.broker_id
        replica.isr = isr
        now = monotonic_ms()
        replica.followers = {broker: FollowerPosition(now) for broker in replica.replicas if broker != self.broker_id}
        replica.high_watermark = min(replica.high_watermark, partition_log.log_end)
        replica.address = None
        self._set_role(replica, Role.LEADER)
        log.info("%s-%d: leader at epoch %d from offset %d, ISR %s", replica.topic, replica.partition, epoch,
                 replica.epoch_start, list(isr))

    def _become_follower(self, replica: Replica, epoch: int, leader: int, address: tuple) -> None:
        self._stop_leading(replica, f"broker {leader} leads it now")
        replica.leader_epoch = epoch
        replica.leader = leader
        replica.address = address
        replica.followers = {}
        replica.needs_truncation = True
        self._set_role(replica, Role.FOLLOWER)
        if self.fetcher is not None:
            self.fetcher.follow(replica)
        log.info("%s-%d: following broker %d (%s:%d) at epoch %d", replica.topic, replica.partition, leader,
                 *address, epoch)

    def _stop_leading(self, replica: Replica, why: str) -> None:
        waiters, replica.waiters = replica.waiters, deque()
        for waiter in waiters:
            self._answer(messages.KIND_ACK, messages.encode_ack(
                waiter.request_id, ErrorCode.NOT_LEADER, waiter.partition, -1, -1,
                f"{replica.topic}-{replica.partition}: {why}"))
        if self.fetcher is not None and replica.role == Role.FOLLOWER:
            self.fetcher.remove(replica)

    def forget(self, partition_log) -> None:
        """The log is being deleted: its durability-2 produces are refused, its
        follower's fetching stops, and the partition is no longer a replica here."""
        replica = self.by_log.pop(partition_log, None)
        if replica is None:
            return
        self._stop_leading(replica, "its topic was deleted")
        if self.fetcher is not None:
            self.fetcher.remove(replica)
        self.replicas.pop((replica.topic, replica.partition), None)

    def _set_role(self, replica: Replica, role: int) -> None:
        replica.role = role
        self._woken.add((replica.topic, replica.partition))  # waiting fetches learn it at once

    # --- produces ----------------------------------------------------------------

    def get(self, topic: str, partition: int):
        return self.replicas.get((topic, partition))

    def refusal(self, replica: Replica, mode: int):
        """``(error code, reason)`` if a produce in ``mode`` may not be appended, else None."""
        if replica.role != Role.LEADER:
            return ErrorCode.NOT_LEADER, f"{replica.topic}-{replica.partition}: this broker does not lead it"
        if not self._may_act():
            return ErrorCode.NOT_LEADER, (f"{replica.topic}-{replica.partition}: no ZooKeeper lease (the session "
                                          f"may have expired), or roles not applied yet: not taking produces")
        if mode == Mode.ACK_REPLICATED and len(replica.isr) < replica.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS, (f"{replica.topic}-{replica.partition}: ISR {list(replica.isr)} "
                                                   f"is smaller than min.insync.replicas "
                                                   f"({replica.log.config.min_insync_replicas})")
        return None

    def waits_to_act(self, replica) -> bool:
        """This broker leads ``replica`` (None: any) but may not act for the moment: a
        produce to it is held (``ProduceHandler``) rather than refused, until it may."""
        return (replica is None or replica.role == Role.LEADER) and not self._may_act()

    def _may_act(self) -> bool:
        """A leader takes and acknowledges produces only within the registrar's ZooKeeper
        lease, and only once it applied every roles message the registrar sent (the
        lease of a new session may be renewed before its roles, a demotion perhaps,
        arrived)."""
        return monotonic_ms() < self._lease() and self.applied_seq >= self._roles_seq()

    def wait_for_replicas(self, replica: Replica, request_id: int, partition: int, offset: int,
                          next_offset: int) -> None:
        replica.waiters.append(Waiter(next_offset, request_id, partition, offset))

    def appended(self, replica: Replica) -> None:
        """Sets were appended to a led partition: followers waiting for them are woken,
        and an ISR of the leader alone moves the high watermark at once."""
        self._woken.add((replica.topic, replica.partition))
        self._advance_high_watermark(replica)

    # --- the leader's view of its followers ----------------------------------------

    def positions(self, follower: int, positions) -> None:
        """A follower's fetch reached the leader: its log end per partition."""
        now = monotonic_ms()
        for topic, partition, leader_epoch, offset in positions:
            replica = self.replicas.get((topic, partition))
            if replica is None or replica.role != Role.LEADER or leader_epoch != replica.leader_epoch:
                continue
            position = replica.followers.get(follower)
            if position is None:
                continue  # not an assigned replica
            leader_end = replica.log.log_end
            if offset > leader_end:
                continue  # not a position this log can have: not a follower of it
            if offset >= leader_end:
                position.caught_up_ms = now
            elif offset >= position.leader_end_at_fetch:
                position.caught_up_ms = position.fetch_ms
            position.leader_end_at_fetch = leader_end
            position.fetch_ms = now
            position.log_end = offset
            if (follower not in replica.isr and replica.isr_requested_ms is None and offset >= replica.epoch_start
                    and offset >= replica.high_watermark and self._high_watermark_known(replica)):
                self._ask_isr(replica, (*replica.isr, follower), now)
            self._advance_high_watermark(replica)

    def _high_watermark_known(self, replica: Replica) -> bool:
        """Every ISR member has reported since this worker leads: the high watermark is
        theirs, not one a respawned or new leader started from."""
        return all(replica.followers.get(broker) is not None and replica.followers[broker].log_end >= 0
                   for broker in replica.isr if broker != self.broker_id)

    def flushed(self, partition_log) -> None:
        """A flush of ``partition_log`` completed: a leader alone in its ISR may move its
        high watermark up to it."""
        replica = self.replicas.get((partition_log.topic, partition_log.partition))
        if replica is not None and replica.log is partition_log:
            self._advance_high_watermark(replica)

    def _advance_high_watermark(self, replica: Replica) -> None:
        if replica.role != Role.LEADER:
            return
        end = replica.log.log_end
        # An ISR being grown counts with its new members at once (Kafka's "maximal ISR",
        # KIP-497): ZooKeeper may list them already, and the controller could elect one.
        members = replica.isr if not replica.isr_requested else set(replica.isr) | set(replica.isr_requested)
        for broker in members:
            if broker != self.broker_id:
                position = replica.followers.get(broker)
                known = position.log_end if position is not None else -1
                if known < end:
                    end = known
        if self._alone(replica):
            # No other copy ZooKeeper knows of (a follower being added does not count
            # until it is listed): readers see only what a power cut here cannot take
            # (a lone ISR member comes back as the leader with what its disk kept, and
            # a consumer must never have read bytes the log then writes again).
            end = min(end, replica.log.flushed_end)
        if end > replica.high_watermark:
            replica.high_watermark = end
            self._woken.add((replica.topic, replica.partition))
            self._publisher.publish(replica.log)
        self._answer_waiters(replica)

    def _alone(self, replica: Replica) -> bool:
        """The leader is its ISR's only member, as ZooKeeper lists it."""
        return tuple(replica.isr) == (self.broker_id,)

    def _answer_waiters(self, replica: Replica) -> None:
        waiters = replica.waiters
        high_watermark = replica.high_watermark
        # Covered by an ISR that shrank below min.insync.replicas meanwhile: refused
        # (Kafka's NotEnoughReplicasAfterAppend), not acknowledged with too few copies.
        # A leader alone in its ISR refuses what it holds without waiting for the flush
        # its readers wait for.
        code = ErrorCode.NO_ERROR if len(replica.isr) >= replica.log.config.min_insync_replicas \
            else ErrorCode.NOT_ENOUGH_REPLICAS
        if code and self._alone(replica) and not replica.isr_requested:
            high_watermark = replica.log.log_end
        if not waiters or waiters[0].next_offset > high_watermark or not self._may_act():
            return  # none covered yet; or no acknowledgement without the lease: tick() tries again
        answer, encode_ack = self._answer, messages.encode_ack
        while waiters and waiters[0].next_offset <= high_watermark:  # in log order: the covered ones lead
            waiter = waiters.popleft()
            if code:
                answer(messages.KIND_ACK, encode_ack(
                    waiter.request_id, code, waiter.partition, -1, -1,
                    f"{replica.topic}-{replica.partition}: appended, but the ISR {list(replica.isr)} shrank "
                    f"below min.insync.replicas ({replica.log.config.min_insync_replicas})"))
            else:
                answer(messages.KIND_ACK, encode_ack(waiter.request_id, ErrorCode.NO_ERROR, waiter.partition,
                                                     waiter.offset, waiter.next_offset))

    def tick(self, now: int) -> None:
        """Shrink the ISRs of lagging followers; answer waiters the lease held back."""
        lag_ms = self.config.replica_lag_time_max_ms
        for replica in self.replicas.values():
            if replica.role != Role.LEADER:
                continue
            if replica.isr_requested_ms is not None and now - replica.isr_requested_ms > ISR_REQUEST_RETRY_MS:
                replica.isr_requested_ms = None  # unanswered: decide again
                replica.isr_requested = ()
            if replica.isr_requested_ms is None:
                lagging = [broker for broker in replica.isr if broker != self.broker_id
                           and now - replica.followers.get(broker, FollowerPosition(0)).caught_up_ms > lag_ms]
                if lagging:
                    self._shrink(replica, lagging, lag_ms, now)
            self._answer_waiters(replica)

    def _shrink(self, replica: Replica, lagging: list, lag_ms: int, now: int) -> None:
        isr = tuple(broker for broker in replica.isr if broker not in lagging)
        if isr == (self.broker_id,) and replica.log.flushed_end < replica.high_watermark:
            # Left alone, the leader would hold the only copy of what readers saw: it
            # flushes that first, and asks on a tick after the flush completed.
            self._request_flush(replica.log)
            return
        log.warning("%s-%d: followers %s are more than %d ms behind (replica.lag.time.max.ms): "
                    "leaving the ISR", replica.topic, replica.partition, lagging, lag_ms)
        self._ask_isr(replica, isr, now)

    def _ask_isr(self, replica: Replica, isr: tuple, now: int) -> None:
        replica.isr_requested_ms = now
        replica.isr_requested = isr
        self._request_isr(topic=replica.topic, partition=replica.partition, leader_epoch=replica.leader_epoch,
                          isr=list(isr), version=replica.version)

    def take_woken(self) -> list:
        woken, self._woken = self._woken, set()
        return list(woken)
