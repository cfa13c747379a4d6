"""The controller's decisions for one partition (mpbroker.registrar.leader_election):
first states, a dead leader replaced from the ISR only, an ISR shrinking, going offline
with the ISR kept, the ISR member coming back, unclean election when asked for, and
bounced brokers (registered again unseen: a failure and a startup)."""

from mpbroker.registrar.leader_election import first_state, next_state
from mpbroker.registry.replication import NO_LEADER, PartitionState

REPLICAS = [2, 3, 1]


def test_a_new_partition_waits_for_a_live_replica_and_prefers_the_first():
    assert first_state(REPLICAS, set(), 5) is None
    assert first_state(REPLICAS, {1, 2, 3}, 5) == PartitionState(2, 0, (2, 3, 1), 5)
    assert first_state(REPLICAS, {1, 3}, 5) == PartitionState(3, 0, (3, 1), 5)


def test_a_live_leader_stays_and_dead_isr_members_leave():
    state = PartitionState(2, 4, (2, 3, 1), 5)
    assert next_state(state, REPLICAS, {1, 2, 3}, 6) is None
    assert next_state(state, REPLICAS, {2, 1}, 6) == PartitionState(2, 5, (2, 1), 6)


def test_a_dead_leader_is_replaced_by_a_live_isr_member_in_the_assignments_order():
    state = PartitionState(2, 4, (2, 1, 3), 5)
    assert next_state(state, REPLICAS, {1, 3}, 6) == PartitionState(3, 5, (1, 3), 6)


def test_never_a_replica_outside_the_isr_unless_unclean():
    state = PartitionState(2, 4, (2,), 5)  # 3 and 1 fell behind earlier
    offline = next_state(state, REPLICAS, {1, 3}, 6)
    assert offline == PartitionState(NO_LEADER, 5, (2,), 6)  # the ISR is kept: 2 has every acknowledged write
    assert next_state(offline, REPLICAS, {1, 3}, 6) is None  # stays offline
    assert next_state(offline, REPLICAS, {1, 2, 3}, 7) == PartitionState(2, 6, (2,), 7)  # 2 is back
    assert next_state(state, REPLICAS, {1, 3}, 6, unclean=True) == PartitionState(3, 5, (3,), 6)


def test_a_bounced_leader_hands_over_to_the_next_live_isr_member_and_leaves_the_isr():
    state = PartitionState(2, 4, (2, 3, 1), 5)
    assert next_state(state, REPLICAS, {1, 2, 3}, 6, bounced={2}) == PartitionState(3, 5, (3, 1), 6)
    assert next_state(state, REPLICAS, {1, 2}, 6, bounced={2}) == PartitionState(1, 5, (1,), 6)  # 3 is dead
    assert next_state(state, REPLICAS, {1, 2, 3}, 6, bounced={2, 3}) == PartitionState(1, 5, (1,), 6)


def test_a_bounced_follower_leaves_the_isr_and_the_leader_stays():
    state = PartitionState(2, 4, (2, 3, 1), 5)
    assert next_state(state, REPLICAS, {1, 2, 3}, 6, bounced={3}) == PartitionState(2, 5, (2, 1), 6)
    assert next_state(state, REPLICAS, {1, 2}, 6, bounced={3}) == PartitionState(2, 5, (2, 1), 6)  # dead anyway
    # Bounced but outside the ISR: nothing to do (it rejoins once caught up).
    assert next_state(PartitionState(2, 4, (2, 1), 5), REPLICAS, {1, 2, 3}, 6, bounced={3}) is None


def test_a_bounced_broker_that_is_the_only_live_isr_member_leads_again_at_a_new_epoch():
    state = PartitionState(2, 4, (2, 3), 5)  # 3 died unseen too, or is dead now
    assert next_state(state, REPLICAS, {1, 2}, 6, bounced={2}) == PartitionState(2, 5, (2,), 6)
    assert next_state(PartitionState(2, 4, (2,), 5), REPLICAS, {1, 2, 3}, 6, bounced={2}) == PartitionState(
        2, 5, (2,), 6)
    # Every live ISR member bounced: the first in the assignment's order, the ISR kept.
    assert next_state(PartitionState(2, 4, (2, 1), 5), REPLICAS, {1, 2}, 6, bounced={1, 2}) == PartitionState(
        2, 5, (2, 1), 6)
    # An offline partition whose ISR member came back (registered after the state): elected.
    offline = PartitionState(NO_LEADER, 5, (2,), 6)
    assert next_state(offline, REPLICAS, {1, 2, 3}, 7, bounced={2}) == PartitionState(2, 6, (2,), 7)
