"""What a consumer connector waits for around a change of ownership, so that a group
with no fault hands out each message once (free of ZooKeeper: callables and events).

- ``wait_settled``: a member's start. Its first rebalance waits until the view it
  assigns from -- the group's members, the subscribed topics, their brokers' partitions,
  read with watches -- has not changed for ``rebalance.settle.ms``, at most
  ``SETTLE_LONGEST`` times that. A broker registers a new topic within
  ``TOPIC_SCAN_S`` (1 s) of its first message, each broker on its own: a member started
  meanwhile used to claim nothing, then one broker's partitions, then all of them, and
  each rebalance sent again what was in flight.
- ``wait_finished``: before a rebalance commits and releases, every message handed out
  of the partitions it gives up is waited for (up to ``rebalance.finish.ms``): the
  application asks for the next message (``autofinish.enable=true``) or marks it
  (``mark_finished``: a mirror once the target acknowledged it). The commit then covers
  it, and the next owner, this consumer included, starts after it. A message still
  unfinished at the deadline is delivered again (at least once), as before.
"""

import time

SETTLE_LONGEST = 5  # the first rebalance waits at most this many rebalance.settle.ms
POLL_S = 0.01


def wait_settled(read_view, trigger, closed, quiet_s: float) -> int:
    """Call ``read_view()`` (it sets watches that set ``trigger``) until ``quiet_s`` pass
    without the trigger, or ``SETTLE_LONGEST * quiet_s`` in all, or ``closed``; returns
    the number of reads. The trigger is left set: the rebalance follows."""
    reads = 0
    deadline = time.monotonic() + SETTLE_LONGEST * quiet_s
    while quiet_s > 0 and not closed.is_set():
        trigger.clear()
        read_view()
        reads += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not trigger.wait(min(quiet_s, remaining)):
            break
    trigger.set()
    return reads


def unfinished(infos) -> list:
    """The PartitionTopicInfos with a message handed out and not finished."""
    return [info for info in infos if info.done_offset < info.returned_offset]


def wait_finished(infos, timeout_s: float, closed) -> list:
    """Wait until every message handed out of ``infos`` is finished, at most ``timeout_s``
    or until ``closed``; returns the infos still unfinished."""
    deadline = time.monotonic() + timeout_s
    waiting = unfinished(infos)
    while waiting and not closed.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        closed.wait(min(POLL_S, remaining))
        waiting = unfinished(waiting)
    return waiting
