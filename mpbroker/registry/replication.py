"""The ZooKeeper layout of replicated topics (Kafka 0.8's), and where each partition's
replicas go. No I/O here: the topics tool, the controller and the clients build their
paths and parse their values with these.

    /brokers/topics/<topic>                          {"version":1,"partitions":{"0":[1,2,3],...}
                                                      [,"record_batches":true]}
    /brokers/topics/<topic>/partitions/<p>/state     {"version":1,"leader":L,"leader_epoch":E,
                                                      "isr":[...],"controller_epoch":C,
                                                      "leader_broker_epoch":Z,
                                                      "isr_broker_epochs":{"<id>":Z,...}}
    /controller                                      {"version":1,"brokerid":B,"timestamp":"<ms>"}  ephemeral
    /controller_epoch                                "<epoch>"

A replicated topic is one whose ``/brokers/topics/<topic>`` node holds an assignment;
its partitions are numbered per topic (0..N-1), each placed on the brokers its list
names, the first being the preferred leader. A topic created the 0.7 way (by a
produce, no assignment) has an empty value there and only the brokers' ephemeral
``<broker id>`` children (``layout``); the two kinds share the node, so a 0.7 reader
skips the ``partitions`` child.

``leader_broker_epoch`` (not Kafka 0.8's) is the leader's broker epoch as the
controller read it when it elected it (the czxid of ``/brokers/ids/<leader>``,
KIP-380): the leader leads under the state only while it is still that
registration. It is optional: absent in a state without a leader and in states
written by older code; a leader keeps it when it changes the ISR.

``isr_broker_epochs`` (not Kafka 0.8's either) is the same for the ISR's members:
broker id -> the broker epoch of the registration the state was decided about
(the controller writes every member's it knows, the leader's included). A member
it does not name (a state written by older code, or a member the leader added to
its ISR: ``with_isr``) falls under the mzxid rule. Written only when not empty;
an entry for a broker outside the ISR makes the value not a state.

``record_batches`` (not Kafka 0.8's) is the format of the topic's partition logs: true,
they hold modern record batches (``segments.record_format``: a topic for modern
clients), on the leader and every follower alike; absent (never written false), 0.7
messages. So every topic created before it, and what older readers parse, is unchanged
(they ignore the field).

Placement (``assign_replicas``) follows Kafka 0.8's rule: the brokers sorted by id,
partition p's first replica on broker ``(start + p) mod n`` so leaders go round-robin,
and the other replicas at a distance from the first that grows by one every n
partitions, so that followers spread too: any two brokers share about as many
partitions, and a dead broker's leaderships fall on all the others.
"""

import json
import random
from typing import NamedTuple

from mpbroker.registry.layout import LayoutError, topic_path

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
PARTITIONS_CHILD = "partitions"  # the child of /brokers/topics/<topic> that is not a broker id
NO_LEADER = -1


class PartitionState(NamedTuple):
    leader: int  # broker id, NO_LEADER when none is alive in the ISR
    leader_epoch: int
    isr: tuple  # broker ids of the in-sync replicas, leader included
    controller_epoch: int
    leader_broker_epoch: int | None = None  # the leader's registration czxid when elected; None: not recorded
    isr_broker_epochs: dict | None = None  # ISR member -> its registration czxid when decided; None: none recorded

    def isr_broker_epoch(self, broker: int):
        """The broker epoch this state records for ISR member ``broker``, None if none."""
        return (self.isr_broker_epochs or {}).get(broker)

    def with_isr(self, isr):
        """This state with ISR ``isr``: the members that stay keep their recorded
        broker epochs, one that joins gets none."""
        kept = {broker: epoch for broker, epoch in (self.isr_broker_epochs or {}).items() if broker in isr}
        return self._replace(isr=tuple(isr), isr_broker_epochs=kept or None)

    def value(self) -> bytes:
        document = {"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                    "isr": list(self.isr), "controller_epoch": self.controller_epoch}
        if self.leader_broker_epoch is not None:  # only when set: older readers see Kafka 0.8's value
            document["leader_broker_epoch"] = self.leader_broker_epoch
        if self.isr_broker_epochs:
            document["isr_broker_epochs"] = {str(broker): epoch for broker, epoch in self.isr_broker_epochs.items()}
        return json.dumps(document, separators=(",", ":")).encode()


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/{PARTITIONS_CHILD}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{partition}/state"


# --- the assignment -----------------------------------------------------------------

def assignment_value(assignment: dict, record_batches: bool = False) -> bytes:
    """``{partition: [broker ids]}`` as the node value; ``record_batches``: the topic's logs
    hold record batches (the field is written only then)."""
    partitions = {str(partition): list(replicas) for partition, replicas in sorted(assignment.items())}
    document = {"version": 1, "partitions": partitions}
    if record_batches:
        document["record_batches"] = True
    return json.dumps(document, separators=(",", ":")).encode()


def parse_assignment(topic: str, value: bytes):
    """The assignment ``{partition: [broker ids]}`` in a topic node's value, or None for a
    topic created the 0.7 way (an empty value). LayoutError for anything else."""
    if not value:
        return None
    where = f"{topic_path(topic)}: {value[:100]!r}"
    try:
        document = json.loads(value)
        partitions = document["partitions"]
        assignment = {int(partition): [int(broker) for broker in replicas]
                      for partition, replicas in partitions.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        raise LayoutError(f"{where} is not a replica assignment") from None
    if sorted(assignment) != list(range(len(assignment))) or not assignment:
        raise LayoutError(f"{where}: the partitions are not numbered 0..N-1")
    for partition, replicas in assignment.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise LayoutError(f"{where}: partition {partition} has no replicas, or one twice")
    return assignment


def parse_topic_format(topic: str, value: bytes) -> bool:
    """Whether a replicated topic's logs hold record batches (its node's ``record_batches``);
    False for 0.7 messages (the field absent) and for a topic created the 0.7 way.
    LayoutError if the value is not a document or the field not a boolean."""
    if not value:
        return False
    try:
        document = json.loads(value)
        record_batches = document.get("record_batches", False)
    except (ValueError, TypeError, AttributeError):
        raise LayoutError(f"{topic_path(topic)}: {value[:100]!r} is not a replica assignment") from None
    if not isinstance(record_batches, bool):
        raise LayoutError(f"{topic_path(topic)}: record_batches is {record_batches!r}, not true or false")
    return record_batches


def parse_partition_state(topic: str, partition: int, value: bytes) -> PartitionState:
    """The state in a state node's value (``leader_broker_epoch`` None when the value has
    none: older code's, or a state without a leader; ``isr_broker_epochs`` None when it
    names no member's). LayoutError if it is not one."""
    try:
        document = json.loads(value)
        broker_epoch = document.get("leader_broker_epoch")
        isr = tuple(int(broker) for broker in document["isr"])
        members = {int(broker): int(epoch) for broker, epoch in (document.get("isr_broker_epochs") or {}).items()}
        state = PartitionState(int(document["leader"]), int(document["leader_epoch"]), isr,
                               int(document["controller_epoch"]),
                               None if broker_epoch is None else int(broker_epoch), members or None)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise LayoutError(f"{partition_state_path(topic, partition)}: {value[:100]!r} "
                          "is not a partition state") from None
    if not set(members) <= set(isr):
        raise LayoutError(f"{partition_state_path(topic, partition)}: isr_broker_epochs names brokers outside "
                          f"the ISR {list(isr)}: {sorted(set(members) - set(isr))}")
    return state


# --- placement ----------------------------------------------------------------------

class PlacementError(ValueError):
    """More replicas asked for than there are brokers, or no partitions."""


def assign_replicas(broker_ids, partitions: int, replication_factor: int, *, start: int | None = None,
                    shift: int | None = None, rng=random) -> dict:
    """``{partition: [broker ids]}`` for ``partitions`` partitions of ``replication_factor``
    replicas each over ``broker_ids`` (see the module docstring). ``start`` and ``shift``
    (random when None) make a placement repeatable."""
    brokers = sorted(set(broker_ids))
    count = len(brokers)
    if partitions < 1:
        raise PlacementError(f"--partitions must be at least 1, not {partitions}")
    if replication_factor < 1:
        raise PlacementError(f"--replication-factor must be at least 1, not {replication_factor}")
    if replication_factor > count:
        raise PlacementError(f"replication factor {replication_factor} needs {replication_factor} live brokers; "
                             f"{count} registered ({', '.join(map(str, brokers)) or 'none'})")
    start = rng.randrange(count) if start is None else start
    shift = rng.randrange(count) if shift is None else shift
    assignment = {}
    for partition in range(partitions):
        if partition > 0 and partition % count == 0:
            shift += 1  # a new round over the brokers: the followers move one further
        first = (start + partition) % count
        replicas = [brokers[first]]
        for replica in range(1, replication_factor):
            distance = 1 + (shift + replica - 1) % (count - 1)
            replicas.append(brokers[(first + distance) % count])
        assignment[partition] = replicas
    return assignment
