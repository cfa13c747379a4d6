"""Network faults between real servers: ZooKeeper and three brokers, each in a network
namespace of its own (tests/faults/netcluster/), one replicated partition (RF 3,
min.insync.replicas 2), durability-2 produces from the root namespace.

- The leader isolated (from the other brokers, ZooKeeper and the clients): its session
  expires, the controller elects another leader within the session timeout plus a few
  seconds, which acknowledges; after the heal the old leader rejoins the ISR, every
  acknowledged message reads back once, in order, and the three logs end byte-identical.
- The leader and ZooKeeper cut from both followers: the leader keeps its session but
  its ISR shrinks to itself, so no durability-2 produce is acknowledged (error 10)
  until the heal; then the ISR grows back and acknowledgements resume.

The smoke tests of the node and network layer; workloads and a history checker come
on top of it.
"""

import time

from mpbroker.codec.errors import ErrorCode
from tests.faults.netcluster.cluster import BROKER_IDS, SESSION_MS, ZOOKEEPER
from tests.polling import wait_for


def produce_batches(cluster, topic: str, prefix: str, count: int, acked: list) -> None:
    for index in range(count):
        payloads = [f"{prefix}-{index}-{part}".encode() for part in range(3)]
        cluster.produce_until_acked(topic, payloads, timeout=20)
        acked += payloads


def test_an_isolated_leader_is_replaced_and_rejoins_with_nothing_lost(netcluster, network):
    cluster = netcluster
    cluster.create_topic("iso", 1, 3)
    old_leader, _ = cluster.produce_until_acked("iso", [b"first"])
    acked = [b"first"]
    cluster.wait_isr("iso", BROKER_IDS)
    produce_batches(cluster, "iso", "before", 20, acked)

    cut = time.monotonic()
    network.isolate(cluster.broker_node(old_leader))
    new_leader = wait_for(lambda: cluster.leader("iso") not in (None, old_leader) and cluster.leader("iso"),
                          SESSION_MS / 1000 + 6, "another leader elected", detail=cluster.log_tails, interval=0.02)
    elected_s = time.monotonic() - cut
    leader, _ = cluster.produce_until_acked("iso", [b"after-first"], timeout=20)
    first_ack_s = time.monotonic() - cut
    assert leader != old_leader
    acked.append(b"after-first")
    produce_batches(cluster, "iso", "after", 20, acked)
    assert old_leader not in cluster.isr("iso")

    healed = time.monotonic()
    network.heal()
    cluster.wait_isr("iso", BROKER_IDS, timeout=30)
    rejoined_s = time.monotonic() - healed
    produce_batches(cluster, "iso", "healed", 5, acked)
    print(f"\nisolated leader {old_leader}: leader {new_leader} elected after {elected_s:.2f}s, first acknowledgement "
          f"after {first_ack_s:.2f}s (session {SESSION_MS} ms); back in the ISR {rejoined_s:.2f}s after the heal")
    assert elected_s < SESSION_MS / 1000 + 5, f"election took {elected_s:.1f}s"

    assert cluster.leader("iso") == new_leader
    cluster.check_read_back("iso", acked)
    cluster.wait_identical("iso")


def test_a_leader_cut_from_both_followers_acknowledges_nothing_until_healed(netcluster, network):
    cluster = netcluster
    cluster.create_topic("cut", 1, 3)
    leader, _ = cluster.produce_until_acked("cut", [b"first"])
    acked = [b"first"]
    cluster.wait_isr("cut", BROKER_IDS)
    produce_batches(cluster, "cut", "before", 5, acked)
    followers = [broker_id for broker_id in BROKER_IDS if broker_id != leader]

    cut = time.monotonic()
    network.partition([cluster.node(leader), cluster.node(ZOOKEEPER)], [cluster.node(f) for f in followers])
    # Every produce sent after the cut is refused: the followers cannot fetch it, and an
    # ISR of the leader alone is below min.insync.replicas. The first one may wait for
    # the ISR to shrink (then answered with error 10); later ones are refused at once.
    # The cut lasts until the followers' sessions expired too (their registrations gone).
    answers = []
    while len(answers) < 3 or cluster.registered() & set(followers):
        assert time.monotonic() - cut < SESSION_MS / 1000 + 15, \
            f"refusals {answers}, registered {cluster.registered()}\n{cluster.log_tails()}"
        sent = time.monotonic()
        ack = cluster.produce(leader, "cut", [f"refused-{len(answers)}".encode()], timeout=15)
        answers.append((ack.error, time.monotonic() - sent))
        assert ack.error != ErrorCode.NO_ERROR, f"acknowledged with both followers cut off: {answers}"
        if len(answers) == 1:
            first_refusal_s = time.monotonic() - cut
        time.sleep(0.05)
    sessions_gone_s = time.monotonic() - cut
    assert {error for error, _ in answers} == {ErrorCode.NOT_ENOUGH_REPLICAS}, answers
    assert cluster.isr("cut") == (leader,)
    assert cluster.leader("cut") == leader and leader in cluster.registered(), "the leader kept its session"

    healed = time.monotonic()
    network.heal()
    cluster.produce_until_acked("cut", [b"after-heal"], timeout=30)
    acked.append(b"after-heal")
    first_ack_s = time.monotonic() - healed
    cluster.wait_isr("cut", BROKER_IDS, timeout=30)
    full_isr_s = time.monotonic() - healed
    produce_batches(cluster, "cut", "healed", 5, acked)
    print(f"\nleader {leader} cut from {followers}: first refusal {first_refusal_s:.2f}s after the cut (it waited "
          f"{answers[0][1]:.2f}s), {len(answers)} refusals (error 10) until the followers' sessions were gone "
          f"({sessions_gone_s:.2f}s); after the heal, first acknowledgement {first_ack_s:.2f}s, full ISR "
          f"{full_isr_s:.2f}s")

    assert cluster.leader("cut") == leader
    cluster.check_read_back("cut", acked)
    cluster.wait_identical("cut")
