"""What the controller decides for one partition, as pure functions of its replicas, its
last state and the brokers alive now: the first state of a new partition, and the next
state after brokers died or came back. No I/O: ``controller`` reads and writes.

The rules (Kafka 0.8's, with what Jepsen 2013 taught):
- A new partition gets a state once one of its replicas is alive: the ISR is its live
  replicas, the leader the first of them in the assignment's order (the preferred
  replica), leader epoch 0.
- A live leader keeps leading; ISR members that died leave the ISR (the leader epoch is
  bumped, so every replica learns the ISR changed).
- A dead leader is replaced by the first live ISR member in the assignment's order,
  leader epoch + 1. Only ISR members: they hold every acknowledged write.
- No live ISR member: the partition goes offline (leader -1) and its ISR is kept as it
  was, so that the first of them to come back is elected and nothing acknowledged is
  lost. With unclean election enabled, a live replica outside the ISR is elected
  instead, at the price of losing what only the ISR had.
- A bounced broker (KIP-380: it registered again, with a new czxid, since the state
  was decided, without the controller seeing it dead) counts as a failure and a
  startup: it restarted with the log it has now, which may lack what it had
  acknowledged (a power cut loses what no fsync covered), so it holds nothing the
  ISR vouched for. It leaves the ISR, and a partition it led gets the first other
  live ISR member as leader, leader epoch + 1. If only bounced ISR members are
  alive, the first of them leads again, at a new leader epoch: its followers then
  learn where its log ends before they fetch (KIP-279), instead of taking its log
  as the continuation of the epoch it led before.
"""

from mpbroker.registry.replication import NO_LEADER, PartitionState


def first_state(replicas, live, controller_epoch: int):
    """The state a new partition starts with, or None while none of its replicas is alive."""
    isr = tuple(broker for broker in replicas if broker in live)
    if not isr:
        return None
    return PartitionState(isr[0], 0, isr, controller_epoch)


def next_state(state: PartitionState, replicas, live, controller_epoch: int, *, unclean: bool = False,
               bounced=frozenset()):
    """The state after the set of live brokers became ``live`` (and the brokers in
    ``bounced`` restarted since ``state`` was written), or None if it stays."""
    live_isr = tuple(broker for broker in state.isr if broker in live)
    clean_isr = tuple(broker for broker in live_isr if broker not in bounced)
    epoch = state.leader_epoch + 1
    if state.leader != NO_LEADER and state.leader in live and state.leader not in bounced:
        if clean_isr == state.isr:
            return None
        return PartitionState(state.leader, epoch, clean_isr, controller_epoch)
    electable = [broker for broker in replicas if broker in clean_isr]
    if electable:
        return PartitionState(electable[0], epoch, clean_isr, controller_epoch)
    electable = [broker for broker in replicas if broker in live_isr]  # bounced, all of them
    if electable:
        return PartitionState(electable[0], epoch, live_isr, controller_epoch)
    if unclean:
        alive = [broker for broker in replicas if broker in live]
        if alive:
            return PartitionState(alive[0], epoch, (alive[0],), controller_epoch)
    if state.leader == NO_LEADER:
        return None  # offline already; waiting for an ISR member
    return PartitionState(NO_LEADER, epoch, state.isr, controller_epoch)
