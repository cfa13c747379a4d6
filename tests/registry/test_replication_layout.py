"""The layout of replicated topics (mpbroker.registry.replication): node values written
and read back, refusals of values that are not Kafka 0.8's, and the placement of
replicas (distinct brokers, leaders round-robin, followers spread)."""

import collections
import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.registry.layout import LayoutError
from mpbroker.registry.replication import (
    PartitionState,
    PlacementError,
    assign_replicas,
    assignment_value,
    parse_assignment,
    parse_partition_state,
    parse_topic_format,
    partition_state_path,
)


def test_assignment_round_trip_in_kafkas_format():
    value = assignment_value({1: [2, 3, 1], 0: [1, 2, 3]})
    assert value == b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}'
    assert parse_assignment("t", value) == {0: [1, 2, 3], 1: [2, 3, 1]}


def test_a_record_batch_topic_says_so_and_the_others_are_unchanged():
    value = assignment_value({0: [1, 2]}, record_batches=True)
    assert value == b'{"version":1,"partitions":{"0":[1,2]},"record_batches":true}'
    assert parse_assignment("t", value) == {0: [1, 2]}  # what older readers take from it
    assert parse_topic_format("t", value) is True
    # absent: 0.7 messages, as every topic written before the field
    assert assignment_value({0: [1, 2]}) == assignment_value({0: [1, 2]}, record_batches=False)
    assert b"record_batches" not in assignment_value({0: [1, 2]})
    assert parse_topic_format("t", assignment_value({0: [1, 2]})) is False
    assert parse_topic_format("t", b"") is False  # created the 0.7 way
    for bad in (b'{"partitions":{"0":[1]},"record_batches":1}', b"[]", b"not json"):
        with pytest.raises(LayoutError, match="/brokers/topics/t"):
            parse_topic_format("t", bad)


def test_a_topic_created_the_07_way_has_no_assignment():
    assert parse_assignment("t", b"") is None


@pytest.mark.parametrize("value", [b"not json", b"[]", b'{"version":1}', b'{"partitions":{"0":[1],"2":[1]}}',
                                   b'{"partitions":{"0":[]}}', b'{"partitions":{"0":[1,1]}}',
                                   b'{"partitions":{}}', b'{"partitions":{"x":[1]}}'])
def test_values_that_are_not_an_assignment_are_refused(value):
    with pytest.raises(LayoutError, match="/brokers/topics/t"):
        parse_assignment("t", value)


def test_partition_state_round_trip():
    state = PartitionState(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4)
    assert parse_partition_state("t", 0, state.value()) == state
    assert partition_state_path("t", 5) == "/brokers/topics/t/partitions/5/state"
    with pytest.raises(LayoutError, match="partitions/0/state"):
        parse_partition_state("t", 0, b'{"leader":1}')


def test_the_leaders_broker_epoch_is_written_only_when_set_and_optional_when_read():
    elected = PartitionState(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4, leader_broker_epoch=4097)
    assert elected.value() == (b'{"version":1,"leader":2,"leader_epoch":7,"isr":[2,3],"controller_epoch":4,'
                               b'"leader_broker_epoch":4097}')
    assert parse_partition_state("t", 0, elected.value()) == elected
    # Without it (older code, a state without a leader): Kafka 0.8's value, read back as None.
    older = b'{"version":1,"leader":2,"leader_epoch":7,"isr":[2,3],"controller_epoch":4}'
    assert PartitionState(2, 7, (2, 3), 4).value() == older
    assert parse_partition_state("t", 0, older).leader_broker_epoch is None
    assert parse_partition_state("t", 0, older[:-1] + b',"leader_broker_epoch":null}').leader_broker_epoch is None
    for value in (older[:-1] + b',"leader_broker_epoch":"x"}', older[:-1] + b',"leader_broker_epoch":[1]}', b"[]"):
        with pytest.raises(LayoutError, match="partitions/0/state"):
            parse_partition_state("t", 0, value)


def test_the_isr_members_broker_epochs_are_optional_and_kept_for_members_that_stay():
    decided = PartitionState(2, 7, (2, 3), 4, 4097, {2: 4097, 3: 4100})
    assert decided.value() == (b'{"version":1,"leader":2,"leader_epoch":7,"isr":[2,3],"controller_epoch":4,'
                               b'"leader_broker_epoch":4097,"isr_broker_epochs":{"2":4097,"3":4100}}')
    assert parse_partition_state("t", 0, decided.value()) == decided
    assert decided.isr_broker_epoch(3) == 4100 and decided.isr_broker_epoch(5) is None
    # A leader's ISR change: members that stay keep theirs, one that joins gets none.
    assert decided.with_isr((2, 5)) == PartitionState(2, 7, (2, 5), 4, 4097, {2: 4097})
    assert decided.with_isr((2, 3, 5)).isr_broker_epochs == {2: 4097, 3: 4100}
    assert PartitionState(2, 7, (2, 3), 4).with_isr((2,)) == PartitionState(2, 7, (2,), 4)
    # Absent, or naming no member: none recorded (the value is Kafka 0.8's, and the mzxid rule applies).
    older = b'{"version":1,"leader":2,"leader_epoch":7,"isr":[2,3],"controller_epoch":4}'
    assert PartitionState(2, 7, (2, 3), 4, None, {}).value() == older
    for value in (older, older[:-1] + b',"isr_broker_epochs":{}}', older[:-1] + b',"isr_broker_epochs":null}'):
        assert parse_partition_state("t", 0, value).isr_broker_epochs is None
    for bad in (b'[1,2]', b'{"2":"x"}', b'{"x":1}', b'{"5":1}'):  # not a map of ISR members to epochs
        with pytest.raises(LayoutError, match="partitions/0/state"):
            parse_partition_state("t", 0, older[:-1] + b',"isr_broker_epochs":' + bad + b"}")


def test_placement_of_kafkas_example():
    # 5 brokers, 10 partitions, 3 replicas, start 0, shift 0: leaders 0..4 twice, and the
    # followers one further apart in the second round.
    assignment = assign_replicas([4, 2, 0, 1, 3], 10, 3, start=0, shift=0)
    assert assignment[0] == [0, 1, 2] and assignment[4] == [4, 0, 1]
    assert assignment[5] == [0, 2, 3] and assignment[9] == [4, 1, 2]


def test_too_few_brokers_or_bad_counts_are_refused():
    with pytest.raises(PlacementError, match="needs 3 live brokers; 2 registered"):
        assign_replicas([1, 2], 4, 3)
    with pytest.raises(PlacementError, match="partitions"):
        assign_replicas([1, 2], 0, 1)
    with pytest.raises(PlacementError, match="replication-factor"):
        assign_replicas([1, 2], 1, 0)


@given(brokers=st.sets(st.integers(0, 1000), min_size=1, max_size=9), partitions=st.integers(1, 60),
       data=st.data())
def test_placement_properties(brokers, partitions, data):
    factor = data.draw(st.integers(1, len(brokers)))
    assignment = assign_replicas(brokers, partitions, factor, rng=random.Random(data.draw(st.integers())))
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= brokers
    leaders = collections.Counter(replicas[0] for replicas in assignment.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1  # leaders round-robin
    if factor > 1 and partitions >= len(brokers) * (len(brokers) - 1):
        # followers spread: every broker follows some partition
        followers = {broker for replicas in assignment.values() for broker in replicas[1:]}
        assert followers == brokers


def test_pairs_of_brokers_share_partitions_evenly():
    assignment = assign_replicas(range(4), 48, 2, start=1, shift=2)
    pairs = collections.Counter(frozenset(replicas) for replicas in assignment.values())
    assert set(pairs) == {frozenset(pair) for pair in itertools.combinations(range(4), 2)}
    assert max(pairs.values()) - min(pairs.values()) <= 4
