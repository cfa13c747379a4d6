"""The controller: one broker of the cluster elects the leaders of the replicated
topics' partitions and writes their states to ZooKeeper (Kafka 0.8's
``KafkaController``, reduced to what mpbroker needs so far).

It runs in the registrar process, on the broker's own ZooKeeper session: a broker
that lost its session has lost its registration and its controllership together.

Becoming the controller: create the ephemeral ``/controller`` node (the first broker
to do so wins; the others watch for it to go), then bump ``/controller_epoch`` with a
conditional write. The epoch is in every state the controller writes, so a state
written by a newer controller is never overwritten by an older one: before each write
the controller checks that the state's epoch is not newer than its own (if it is, it
resigns), and each write is conditional on the version of the node it read, so a
write that raced with another fails and is read again at the next round.

Every round (``ROUND_S``, and at once when the live brokers change) it reads the live
brokers and every replicated topic's assignment and states, and writes what
``leader_election`` decides: a first state for a partition that has none (from the
round after the topic appeared: the brokers' registrars, which read the assignments
every 250 ms, have told their acceptors the topic is replicated by then, so no
produce that finds the new leader is taken the 0.7 way, unreplicated), a new
leader or a smaller ISR after brokers died, an ISR member elected when the partition
was offline. Unclean election (a replica outside the ISR) is off unless
``unclean.leader.election.enable=true``.

Bounced brokers (Kafka's broker epoch, KIP-380): a broker that was killed and
started again registers ``/brokers/ids/<id>`` anew; if the controller did not look
while the id was missing (it looks once per registrar step, and a restarted broker
registers a few hundred milliseconds after its old session expired; a new controller
was not looking at all), the set of live ids is the same as before. So the
controller keeps each live broker's broker epoch, the czxid of its registration
node, and writes those it read at the start of the round into every state it
writes (first states too): the leader's (``leader_broker_epoch``) and every ISR
member's (``isr_broker_epochs``, the leader's included; a member of an offline
state's kept ISR, not live, keeps the one recorded before). A broker is bounced for
a partition when its czxid changed between two rounds; or, when the state names a
broker epoch for it (``leader_broker_epoch`` if it leads there, else its entry in
``isr_broker_epochs``), when that is not its live one (it registered again since the
state was decided, even between the read and the write of the very round that wrote
it: that state's mzxid is above its new czxid, and a new controller has no earlier
round to compare with); or else when it registered after the partition's state was
last written (its czxid is above the state node's mzxid: whatever that state says
about it was said about its previous life; the rule for states written by older
code and for a member a leader added to its ISR, whose registration the leader does
not know: ``replica_roles``). The recorded rule is exact: a state rewritten with a
broker's live broker epoch no longer bounces it; and it errs only towards a bounce
(an epoch read before a registration that a leader's ISR write then vouched for,
recorded by a rewrite, takes that member out once more: it catches up and rejoins).
A bounced broker is a failure and a startup (``leader_election``): it may have
lost what it had acknowledged (a power cut takes what no fsync covered), so it
leaves the ISR and its leaderships go to other ISR members, or back to it at a new
leader epoch. The brokers hold their side (``replica_roles``): a broker leads only
under a state that names its current broker epoch (or, without the field, one
written after its registration). A bounce is applied once per partition: one seen
between rounds applies to every partition whose state names the broker in that
round (or, if a ZooKeeper error cut the round short, in the next rounds to the
partitions not decided yet). A partition whose write meets a conflict (its state
changed under the controller: decided again next round, when the czxid no longer
differs and the new state may be newer than the registration) keeps the brokers
bounced there pending, for that partition only, until a write there succeeds or
there is nothing left to change; a broker no longer live is dropped (handled as
dead). Any other partition is judged by its own state alone, so a broker that has
rejoined an ISR since, or been elected again at a new leader epoch, is left alone.
The epochs are read again only when the children of ``/brokers/ids`` changed (its
pzxid).
"""

import json
import logging
import time

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mpbroker.registrar.leader_election import first_state, next_state
from mpbroker.registry import layout, replication
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.topic_admin import topic_names

log = logging.getLogger(__name__)

ROUND_S = 1.0


class Controller:
    def __init__(self, client, broker_id: int, *, unclean: bool = False):
        self.client = client
        self.broker_id = broker_id
        self.unclean = unclean
        self.epoch = None  # the controller epoch while this broker is the controller
        self._next_round = 0.0
        self._live = None  # the live brokers of the last round: broker id -> broker epoch (czxid)
        self._epochs = (None, {})  # (/brokers/ids's pzxid, broker id -> czxid) as last read
        # Brokers whose czxid changed between rounds -> the partitions decided since (a
        # round that a ZooKeeper error cut short leaves the others to the next one).
        self._registered_again = {}
        self._pending = {}  # (topic, partition) -> brokers bounced there whose write conflicted
        self._seen = set()  # the topics of the last round: only they get first states
        self.deleting = set()  # topics marked for deletion: no more elections (registrar.topic_deleter)

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def step(self) -> None:
        """Once per registrar step: take the controllership if it is free; while holding
        it (checked each step: a controller that lost its node stops at once), run a
        round when one is due or the live brokers (or their broker epochs) changed.
        ZooKeeper errors propagate (the registrar retries)."""
        now = time.monotonic()
        if not self.active:
            self._try_to_become_controller()
            if not self.active:
                return
        if not self._still_controller():
            return
        live = self._live_brokers()
        if now < self._next_round and live == self._live:
            return
        self._next_round = now + ROUND_S
        if self._live is not None:
            for broker, epoch in sorted(live.items()):
                if self._live.get(broker, epoch) != epoch:
                    log.warning("broker %d registered again (broker epoch %d, was %d) without being seen gone "
                                "(a restart, or a new session): moving its leaderships and taking it out of the "
                                "ISRs", broker, epoch, self._live[broker])
                    self._registered_again[broker] = set()  # every partition, even one decided before
        # A dead broker is handled as dead.
        self._registered_again = {broker: done for broker, done in self._registered_again.items() if broker in live}
        self._pending = {key: pending for key, brokers in self._pending.items()
                         if (pending := {broker for broker in brokers if broker in live})}
        self._live = live
        topics = topic_names(self.client)
        for topic in topics:  # each topic node read once: _elect skips the 0.7 ones
            self._elect(topic, live, may_start=topic in self._seen)
        self._seen = set(topics)
        if self.active:  # every partition decided: what is left is in _pending
            self._registered_again.clear()
            self._pending = {key: brokers for key, brokers in self._pending.items() if key[0] in self._seen}

    def resign(self) -> None:
        """Stop acting as the controller (and give the node up if it is ours)."""
        if self.active:
            log.info("no longer the controller (epoch %d)", self.epoch)
        self.epoch = None
        self._live = None
        self._registered_again.clear()
        self._pending.clear()
        try:
            value, stat = self.client.get(replication.CONTROLLER)
            if stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete(replication.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    # --- becoming the controller ---------------------------------------------------

    def _try_to_become_controller(self) -> None:
        if self.client.exists(replication.CONTROLLER):  # a read: the usual case costs no failed write
            return
        value = json.dumps({"version": 1, "brokerid": self.broker_id, "timestamp": str(int(time.time() * 1000))})
        try:
            self.client.create(replication.CONTROLLER, value.encode(), ephemeral=True)
        except NodeExistsError:
            return
        try:
            self.epoch = self._bump_epoch()
        except BadVersionError:
            log.warning("another controller bumped the controller epoch meanwhile; resigning")
            self.resign()
            return
        except LayoutError as exc:
            log.error("%s; not taking the controllership", exc)
            self.resign()
            return
        self._live = None
        log.info("this broker is the controller (epoch %d)", self.epoch)

    def _bump_epoch(self) -> int:
        try:
            value, stat = self.client.get(replication.CONTROLLER_EPOCH)
        except NoNodeError:
            try:
                self.client.create(replication.CONTROLLER_EPOCH, b"1")
                return 1
            except NodeExistsError:
                raise BadVersionError() from None
        try:
            epoch = int(value.decode()) + 1
        except ValueError:
            raise LayoutError(f"{replication.CONTROLLER_EPOCH}: {value[:100]!r} is not an epoch") from None
        self.client.set(replication.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
        return epoch

    def _still_controller(self) -> bool:
        try:
            _, stat = self.client.get(replication.CONTROLLER)
        except NoNodeError:
            stat = None
        if stat is None or stat.ephemeralOwner != self.client.client_id[0]:
            log.warning("the /controller node is no longer this session's; resigning")
            self.epoch = None
            self._live = None
            self._registered_again.clear()
            self._pending.clear()
            return False
        return True

    def _live_brokers(self) -> dict:
        """The registered brokers and their broker epochs (the czxid of ``/brokers/ids/<id>``),
        read again only when a child of ``/brokers/ids`` was created or deleted since."""
        try:
            names, stat = self.client.get_children(layout.BROKER_IDS, include_data=True)
        except NoNodeError:
            return {}
        if stat.pzxid == self._epochs[0]:
            return self._epochs[1]
        ids = sorted(int(name) for name in names if name.isdigit())
        results = [self.client.exists_async(layout.broker_path(broker)) for broker in ids]
        epochs = {}
        for broker, result in zip(ids, results):
            node = result.get()
            if node is not None:  # gone since the listing: the next step sees a new pzxid
                epochs[broker] = node.czxid
        self._epochs = (stat.pzxid, epochs)
        return epochs

    # --- one round -------------------------------------------------------------------

    def _elect(self, topic: str, live: dict, may_start: bool) -> None:
        if topic in self.deleting:
            return
        try:
            value, _ = self.client.get(replication.topic_path(topic))
            assignment = replication.parse_assignment(topic, value)
        except NoNodeError:
            return
        except LayoutError as exc:
            log.error("%s; its partitions get no leader", exc)
            return
        if assignment is None:
            return  # created the 0.7 way: no replicas to lead
        for partition, replicas in sorted(assignment.items()):
            if not self.active:
                return
            self._elect_partition(topic, partition, replicas, live, may_start)

    def _elect_partition(self, topic: str, partition: int, replicas, live: dict, may_start: bool) -> None:
        path = replication.partition_state_path(topic, partition)
        try:
            value, stat = self.client.get(path)
        except NoNodeError:
            if not may_start:
                return  # a topic new this round: every broker learns it is replicated first (below)
            state = _with_broker_epochs(first_state(replicas, live, self.epoch), live)
            if state is not None:
                try:
                    self.client.create(path, state.value(), makepath=True)
                    log.info("%s-%d: leader %d, ISR %s (new partition)", topic, partition, state.leader,
                             list(state.isr))
                except NodeExistsError:
                    pass  # written meanwhile: decided from what it says next round
            return
        try:
            current = replication.parse_partition_state(topic, partition, value)
        except LayoutError as exc:
            log.error("%s; left as it is", exc)
            return
        if current.controller_epoch > self.epoch:
            log.warning("%s-%d was written by a newer controller (epoch %d > %d); resigning", topic, partition,
                        current.controller_epoch, self.epoch)
            self.resign()
            return
        key = (topic, partition)
        pending = self._pending.get(key, set())
        again = {broker for broker, done in self._registered_again.items() if key not in done}
        bounced = {broker for broker in (current.leader, *current.isr)
                   if broker in live and (broker in again or broker in pending
                                          or _bounced_since(current, stat.mzxid, broker, live))}
        state = _with_broker_epochs(next_state(current, replicas, live, self.epoch, unclean=self.unclean,
                                               bounced=bounced), live, current)
        conflict = False
        if state is not None:
            try:
                self.client.set(path, state.value(), version=stat.version)
            except BadVersionError:
                conflict = True  # changed since read: decided again next round
        if conflict and bounced:  # these brokers still as bounced there (the new state may be newer than them)
            self._pending[key] = bounced
        else:  # written, or nothing to change: applied
            self._pending.pop(key, None)
        for done in self._registered_again.values():
            done.add(key)
        if state is None or conflict:
            return
        log.info("%s-%d: leader %d, leader epoch %d, ISR %s (live brokers %s%s)", topic, partition, state.leader,
                 state.leader_epoch, list(state.isr), sorted(live),
                 f", bounced {sorted(bounced)}" if bounced else "")


def _bounced_since(state, mzxid: int, broker: int, live: dict) -> bool:
    """Whether live ``broker`` registered again since ``state`` (last written at
    ``mzxid``) was decided: when the state names the broker epoch it was decided
    with (``leader_broker_epoch`` for its leader, else ``isr_broker_epochs``), when
    that is not the live one; otherwise (a state without it, or a member a leader
    added) when the broker registered after the state was written."""
    if broker == state.leader and state.leader_broker_epoch is not None:
        return state.leader_broker_epoch != live[broker]
    recorded = state.isr_broker_epoch(broker)
    if recorded is not None:
        return recorded != live[broker]
    return live[broker] > mzxid


def _with_broker_epochs(state, live: dict, current=None):
    """``state`` naming the broker epochs it was decided with (None stays None): its
    leader's and every live ISR member's as read this round; an ISR member not live
    (an offline state keeps its ISR) keeps what ``current`` recorded for it."""
    if state is None:
        return state
    epochs = {broker: live[broker] if broker in live else current and current.isr_broker_epoch(broker)
              for broker in state.isr}
    state = state._replace(isr_broker_epochs={broker: epoch for broker, epoch in epochs.items()
                                              if epoch is not None} or None)
    if state.leader == replication.NO_LEADER:
        return state
    return state._replace(leader_broker_epoch=live[state.leader])
