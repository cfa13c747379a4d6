"""Where the mirror writes a message on the target cluster, free of I/O.

Kafka 0.7 messages carry no key on the wire, so the mirror cannot re-hash keys; it
keeps the partitioning by position instead:

    A message read from (broker b, partition p) of topic T on the source goes to the
    target partition at the same position: with T's source partitions listed
    (broker id, partition) in ascending order -- the order every 0.7 client and the
    rebalance use -- and (b, p) at position i in that list, the target partition is
    the target's own sorted list at position i mod n (n: T's partitions on the target).

When the target has the same brokers and partition counts as the source (the same
number of partitions in all), each source partition lands on the same (broker,
partition) position, so a keyed consumer hashing ``key % n`` on the target finds
what a producer hashed into that partition on the source. With other counts, every
message of one source partition still lands in one target partition, in its order:
messages that shared a key still share a partition. A source partition that is no
longer registered (its broker died meanwhile) takes the position it would have in
the list. The list is the source's registration now: a broker that joins the
source moves the positions after it (as it moves the keys' partitions on the
source itself).

Two things must hold for "the same (broker, partition)", and the mirror
(``mpbroker.clients.mirror.mirror_maker``) sees to both before a topic's first batch: the target has the
topic on every live broker (else its list is only the brokers that got a first
message: ``mpbroker.clients.producer.topic_spread``), and the source list is complete (a topic
created on the source is registered by its brokers a moment apart: the mirror
waits for every live source broker's registration, up to ``source_wait_s``).

A replicated topic's partitions are numbered per topic already: a message read from its
partition p (``broker_id`` -1, ``leaders.REPLICATED``) has position p, and a replicated
target topic of N partitions takes it in partition p mod N.

The producer carries the position as the message's key and ``position_partitioner``
reduces it modulo the target's partition count.
"""

import bisect

from mpbroker.clients.core.leaders import REPLICATED


def position_of(pairs: list, broker_id: int, partition: int) -> int:
    """The position of (broker_id, partition) among the sorted ``pairs``."""
    return bisect.bisect_left(pairs, (broker_id, partition))


def position_partitioner(position: int, num_partitions: int) -> int:
    """The producer's ``partitioner.class`` for mirrored messages: the key is the source position."""
    return position % num_partitions


class SourcePositions:
    """Positions of a source cluster's partitions, from ``partitions(topic)`` (a sorted
    list of (broker id, partition), e.g. ``ZkBrokerPartitions.partitions``); looked up
    once per batch and topic."""

    def __init__(self, partitions):
        self._partitions = partitions

    def lookup(self):
        """A function ``position(topic, broker_id, partition)`` valid for one batch."""
        pairs_by_topic = {}
        positions = {}

        def position(topic: str, broker_id: int, partition: int) -> int:
            if broker_id == REPLICATED:  # a replicated topic's partition: its number is its position
                return partition
            key = (topic, broker_id, partition)
            found = positions.get(key)
            if found is None:
                pairs = pairs_by_topic.get(topic)
                if pairs is None:
                    pairs = pairs_by_topic[topic] = sorted(tuple(p) for p in self._partitions(topic))
                found = positions[key] = position_of(pairs, broker_id, partition)
            return found
        return position
