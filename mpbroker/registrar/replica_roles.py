"""This broker's replica roles, read from ZooKeeper, and the ISR changes its leaders ask for
(the broker side of Kafka 0.8's ``ReplicaManager``/``Partition`` ZooKeeper work).

Every registrar step it reads the replicated topics' assignments and, for each
partition with a replica on this broker, the state the controller (or the leader)
wrote: this broker leads it, follows a leader (whose address comes from
``/brokers/ids``), or the partition has no leader now ("offline"). What changed since
the last step goes to the supervisor as one ``roles`` message, which hands each entry
to the worker that owns the partition; the replicated topics and their partition
counts go to the acceptor the same way. A partition this broker no longer replicates
is sent as role ``none``. Each entry carries the topic's format (``record_batches``,
from its assignment node): the worker creates the partition's log in it.

A broker leads only under a state that names its current registration (KIP-380):
its broker epoch is the czxid of ``/brokers/ids/<id>``, and the controller writes
the leader's broker epoch, as it read it before deciding, into every state that
names a leader (``leader_broker_epoch``). A state naming another registration named
it leader in a previous life: before a restart, whose log may have lost what it
acknowledged (a power cut takes what no fsync covered), or before a new session;
that includes a state written after this broker registered again, when it did so
between the controller's read of the live brokers and its write. Leading that epoch
again with the log it has now would make its followers truncate to it (they ask
where the epoch ends, KIP-279). A state without the field (older code's) is led
only if it was written after the current registration (the state node's mzxid above
the broker epoch). Otherwise, until the controller, which sees the bounce by the
same czxid, writes a new state (another leader, or this broker again at a new leader
epoch and its new broker epoch), the partition is offline here; following another
broker's leadership needs no such wait. Nor does it lead before it is registered
under its session at all (a step reads the roles before it registers). A leader's
ISR change keeps the field as it was.

The controller also records the broker epoch of every ISR member it decided about
(``isr_broker_epochs``), so that a member that registered again since is seen as
bounced even by a new controller. A leader's ISR change keeps the recorded epochs of
the members that stay and records none for a member it adds: this registrar does not
know which registration of that broker caught up (the follower's fetches do not
carry its broker epoch; reading ``/brokers/ids/<id>`` now would name whatever
registration is there, perhaps one after a restart that lost what the fetches
copied, and record it as vouched for). Without an entry the controller applies the
mzxid rule to that member, as before: it is bounced if it registered after the
state was written. The window left, a follower restarted between its last fetch
and the leader's write, would need the broker epoch in the fetch (Kafka's KIP-903).

An ISR change (``request_isr``) is a leader's, relayed by the supervisor: it is written
only if the state node still names this broker as leader with the same leader epoch,
and conditionally on the version the leader acted under (Kafka 0.8's
``updateIsr`` with its ``zkVersion``), so a leader that lost its leadership
meanwhile, or raced with the controller, cannot overwrite a newer state. Either way
the roles are read again at once, so the worker learns the outcome.

Before anything goes out, ``before_send`` (if set) is given every replicated topic:
the registrar mirrors their settings there (``topic_settings``), so a topic's settings
are on this broker's disk before it takes any role in the topic.

Polling: a step costs one read per replicated topic plus one per hosted partition
(a few hundred reads a second on a broker with a hundred partitions); watches would
save most of them.
"""

import logging

from kazoo.exceptions import BadVersionError, NoNodeError

from mpbroker.clock import monotonic_ms
from mpbroker.registry import layout, replication
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.topic_admin import topic_names

log = logging.getLogger(__name__)


class ReplicaRoles:
    def __init__(self, client, broker_id: int, send, announce=lambda seq: None, broker_epoch=lambda: None):
        self.client = client
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch  # callable(): this broker's registration czxid, None if not registered
        self._held_back = set()  # (topic, partition) named led here by a state older than the registration
        self._send = send  # callable(**fields): a "roles" message to the supervisor
        self._announce = announce  # callable(seq): publish the number of the roles message about to go
        self._seq = 0
        self._topics = None  # last sent: replicated topic -> partition count
        self._entries = {}  # last sent: (topic, partition) -> entry
        self.before_send = None  # callable(replicated topics): run after the reads, before the roles go
        self.deleting = set()  # topics marked for deletion: no longer replicated here (role "none")

    @property
    def replicated_topics(self) -> dict:
        """The replicated topics as last read (topic -> partition count)."""
        return self._topics or {}

    def forget(self) -> None:
        """Send everything again at the next step (a new session may have missed changes)."""
        self._topics = None
        self._entries = {}

    def step(self) -> None:
        """Read the roles and send what changed. ZooKeeper errors propagate."""
        topics, entries = self._read()
        if self.before_send is not None:
            self.before_send(topics)
        message = {}
        if topics != self._topics:
            message["topics"] = topics
        changed = [entry for key, entry in entries.items() if self._entries.get(key) != entry]
        changed += [{**entry, "role": "none"} for key, entry in self._entries.items() if key not in entries]
        if changed:
            message["partitions"] = changed
        if message:
            # Numbered on the monotonic clock (it grows across registrar lives), announced
            # in shared memory before it goes: no leader acts on a role it may have lost
            # until the message is applied (``SlotTable.set_roles_seq``).
            self._seq = max(self._seq + 1, monotonic_ms())
            self._announce(self._seq)
            chunks = [changed[start:start + 1000] for start in range(0, len(changed), 1000)] or [[]]
            for index, chunk in enumerate(chunks):  # a control message is at most 1 MiB
                part = dict(message, partitions=chunk)
                if index == len(chunks) - 1:
                    part["seq"] = self._seq  # on the last part: everything before it is applied then
                self._send(**part)
                message.pop("topics", None)
        self._topics = topics
        self._entries = entries

    def _read(self) -> tuple:
        topics = {}
        entries = {}
        addresses = {}
        for topic in topic_names(self.client):
            if topic in self.deleting:
                continue
            try:
                value, _ = self.client.get(layout.topic_path(topic))
                assignment = replication.parse_assignment(topic, value)
                record_batches = replication.parse_topic_format(topic, value)
            except (NoNodeError, LayoutError):
                continue
            if assignment is None:
                continue
            topics[topic] = len(assignment)
            for partition, replicas in assignment.items():
                if self.broker_id in replicas:
                    entries[(topic, partition)] = self._entry(topic, partition, replicas, addresses, record_batches)
        return topics, entries

    def _entry(self, topic: str, partition: int, replicas, addresses: dict, record_batches: bool = False) -> dict:
        entry = {"topic": topic, "partition": partition, "role": "offline", "leader": replication.NO_LEADER,
                 "host": "", "port": 0, "leader_epoch": -1, "isr": [], "replicas": list(replicas), "version": -1,
                 "record_batches": record_batches}
        try:
            value, stat = self.client.get(replication.partition_state_path(topic, partition))
            state = replication.parse_partition_state(topic, partition, value)
        except NoNodeError:
            return entry
        except LayoutError as exc:
            log.error("%s; the partition stays offline here", exc)
            return entry
        entry.update(leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                     version=stat.version)
        key = (topic, partition)
        if state.leader == self.broker_id:
            epoch = self._broker_epoch()
            if epoch is not None and _leads(state, stat.mzxid, epoch):
                entry["role"] = "leader"
            elif epoch is not None and key not in self._held_back:  # not registered yet: no news
                self._held_back.add(key)
                if state.leader_broker_epoch is not None:
                    why = f"elected under broker epoch {state.leader_broker_epoch}, not this registration's"
                else:
                    why = "written before this registration"
                log.warning("%s-%d: the state naming this broker leader (leader epoch %d) was %s (broker epoch %d); "
                            "not leading until the controller writes a new one", topic, partition, state.leader_epoch,
                            why, epoch)
            if entry["role"] == "leader":
                self._held_back.discard(key)
            return entry
        self._held_back.discard(key)
        if state.leader != replication.NO_LEADER:
            address = addresses.get(state.leader)
            if address is None:
                address = addresses[state.leader] = self._address(state.leader)
            if address is not None:
                entry.update(role="follower", host=address[0], port=address[1])
        return entry

    def _address(self, broker_id: int):
        try:
            value, _ = self.client.get(layout.broker_path(broker_id))
            info = layout.parse_broker(broker_id, value)
        except (NoNodeError, LayoutError):
            return None  # not registered (yet): offline here until it is
        return info.host, info.port

    def request_isr(self, message: dict) -> None:
        """Write the ISR a leader asks for, if it is still the leader at that epoch and
        the state is still the version it acted under. ZooKeeper errors propagate."""
        topic, partition = message["topic"], message["partition"]
        path = replication.partition_state_path(topic, partition)
        try:
            value, stat = self.client.get(path)
            state = replication.parse_partition_state(topic, partition, value)
        except (NoNodeError, LayoutError):
            return
        if (state.leader != self.broker_id or state.leader_epoch != message["leader_epoch"]
                or stat.version != message["version"]):
            self._entries.pop((topic, partition), None)  # make sure the worker hears the current state
            return
        isr = tuple(message["isr"])
        new = state.with_isr(isr)  # the members that stay keep their broker epochs; one added gets none
        try:
            self.client.set(path, new.value(), version=stat.version)
        except BadVersionError:
            self._entries.pop((topic, partition), None)
            return
        log.info("%s-%d: ISR %s -> %s (leader epoch %d)", topic, partition, list(state.isr), list(isr),
                 state.leader_epoch)


def _leads(state, mzxid: int, broker_epoch: int) -> bool:
    """Whether this broker, registered under ``broker_epoch``, leads under ``state`` (a
    state naming it leader, last written at ``mzxid``): the registration the controller
    elected it under is this one; for a state without it (older code's), the state was
    written after this registration."""
    if state.leader_broker_epoch is not None:
        return state.leader_broker_epoch == broker_epoch
    return mzxid > broker_epoch
