"""Faults under load on three real brokers, RF 3, min.insync.replicas 2, durability 2
(the replication issue's list): SIGKILL of the leader (a new leader within the session
timeout plus a few seconds); the leader paused past its session (it acknowledges
nothing after, then rejoins as a follower); a follower killed and restarted, another
paused past replica.lag.time.max.ms (each leaves the ISR and comes back); a rolling
restart; the last replica standing with unclean election off. Each time every
acknowledged message reads back once, in order, and the replicas end byte-identical."""

import os
import signal
import time

from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode
from mpbroker.registry import layout, topic_admin
from mpbroker.registry.replication import NO_LEADER
from tests.broker.wire import WireClient
from tests.clients.helpers import wait_for
from tests.replication.cluster import (
    SESSION_MS,
    Load,
    check_read_back,
    leader_port,
    message_set,
    produce_until_acked,
    start_cluster,
    state,
    wait_identical,
)


def test_sigkill_of_the_leader_loses_no_acknowledged_message(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    topic_admin.create_topic(zk_client, "f", 1, 3)
    first_leader, _ = produce_until_acked(zk_client, brokers, "f", 0, [b"first"])
    with Load(zk_client, brokers, "f") as load:
        wait_for(lambda: len(load.acked) >= 200, 30, what="200 acknowledged messages")
        killed_at = time.monotonic()
        brokers[first_leader].kill_tree()
        wait_for(lambda: load.ack_times and load.ack_times[-1][1] != first_leader, 60,
                 what="an acknowledgement from a new leader")
        failover_s = next(t for t, leader in load.ack_times if leader != first_leader) - killed_at
        count = len(load.acked)
        wait_for(lambda: len(load.acked) >= count + 200, 30, what="200 more acknowledged messages")
    print(f"failover: {failover_s:.2f}s, {len(load.acked)} acknowledged, {len(load.errors)} refused or failed")
    assert failover_s < SESSION_MS / 1000 + 5, f"failover took {failover_s:.1f}s"
    new_leader, port = leader_port(zk_client, brokers, "f", 0)
    assert new_leader != first_leader
    assert check_read_back(port, "f", load.acked)[0] == b"first"
    # The two survivors hold the same bytes (once the follower caught up).
    wait_identical([broker for broker_id, broker in brokers.items() if broker_id != first_leader], "f")
    assert first_leader not in state(zk_client, "f", 0).isr


def test_a_leader_paused_past_its_session_acknowledges_nothing_after_and_rejoins(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    topic_admin.create_topic(zk_client, "s", 1, 3)
    old_leader, _ = produce_until_acked(zk_client, brokers, "s", 0, [b"first"])
    old_port = brokers[old_leader].port
    with Load(zk_client, brokers, "s") as load:
        wait_for(lambda: len(load.acked) >= 100, 30, what="100 acknowledged messages")
        os.killpg(brokers[old_leader].process.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        # Produces sent to the paused leader wait in its socket buffers; it reads
        # them the moment it runs again, before it can know its session is gone.
        late = [WireClient(old_port, 30) for _ in range(4)]
        for index, conn in enumerate(late):
            conn.send(rq.encode_produce_acked(index % 3, "s", 0, message_set([f"late {index}".encode()])))
        wait_for(lambda: state(zk_client, "s", 0).leader not in (old_leader, NO_LEADER), 30,
                 what="a new leader elected")
        time.sleep(1.0)
        os.killpg(brokers[old_leader].process.pid, signal.SIGCONT)
        answers = [responses.decode_produce_ack(conn.receive()) for conn in late]
        for conn in late:
            conn.close()
        assert all(answer.error != ErrorCode.NO_ERROR for answer in answers), answers
        assert all(leader != old_leader for when, leader in load.ack_times if when > stopped_at + 0.5)
        # It rejoins as a follower of the new leader: back in the ISR, the same bytes.
        wait_for(lambda: old_leader in state(zk_client, "s", 0).isr, 60, what="the old leader back in the ISR")
    new_leader, port = leader_port(zk_client, brokers, "s", 0)
    check_read_back(port, "s", load.acked)
    data = wait_identical(list(brokers.values()), "s")
    assert b"late" not in data


def test_a_restarted_follower_catches_up_and_a_paused_one_leaves_and_rejoins_the_isr(broker_factory, zk_connect,
                                                                                       zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2, replica_lag_time_max_ms=1500)
    topic_admin.create_topic(zk_client, "c", 1, 3)
    leader, _ = produce_until_acked(zk_client, brokers, "c", 0, [b"first"])
    first, second = [broker_id for broker_id in brokers if broker_id != leader]
    with Load(zk_client, brokers, "c") as load:
        wait_for(lambda: len(load.acked) >= 100, 30, what="100 acknowledged messages")
        brokers[first].kill_tree()
        wait_for(lambda: first not in state(zk_client, "c", 0).isr, 30, what="the killed follower out of the ISR")
        count = len(load.acked)
        wait_for(lambda: len(load.acked) >= count + 100, 30, what="acknowledgements with an ISR of two")
        brokers[first].start()
        wait_for(lambda: first in state(zk_client, "c", 0).isr, 30, what="the restarted follower back in the ISR")
        # Paused past replica.lag.time.max.ms (but not past its session): the leader
        # takes it out of the ISR itself, and back in once it caught up.
        os.killpg(brokers[second].process.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: second not in state(zk_client, "c", 0).isr, 10, what="the paused follower out")
        finally:
            os.killpg(brokers[second].process.pid, signal.SIGCONT)
        wait_for(lambda: second in state(zk_client, "c", 0).isr, 30, what="the paused follower back in the ISR")
        count = len(load.acked)
        wait_for(lambda: len(load.acked) >= count + 50, 30, what="more acknowledgements")
    assert state(zk_client, "c", 0).leader == leader
    check_read_back(brokers[leader].port, "c", load.acked)
    wait_identical(list(brokers.values()), "c")


def test_a_rolling_restart_under_load_loses_nothing(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    topic_admin.create_topic(zk_client, "rr", 1, 3)
    produce_until_acked(zk_client, brokers, "rr", 0, [b"first"])
    with Load(zk_client, brokers, "rr") as load:
        for broker_id, broker in brokers.items():
            wait_for(lambda: set(state(zk_client, "rr", 0).isr) == set(brokers), 60, what="a full ISR")
            count = len(load.acked)
            wait_for(lambda: len(load.acked) >= count + 50, 30, what="acknowledgements before a restart")
            assert broker.stop() == 0
            broker.start()
        wait_for(lambda: set(state(zk_client, "rr", 0).isr) == set(brokers), 60, what="a full ISR at the end")
        count = len(load.acked)
        wait_for(lambda: len(load.acked) >= count + 50, 30, what="acknowledgements after the restarts")
    _, port = leader_port(zk_client, brokers, "rr", 0)
    check_read_back(port, "rr", load.acked)
    wait_identical(list(brokers.values()), "rr")


def test_with_one_replica_left_and_unclean_election_off_the_partition_refuses(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2)
    topic_admin.create_topic(zk_client, "u", 1, 3)
    leader, _ = produce_until_acked(zk_client, brokers, "u", 0, [b"first"])
    with Load(zk_client, brokers, "u") as load:
        wait_for(lambda: len(load.acked) >= 50, 30, what="50 acknowledged messages")
        followers = [broker_id for broker_id in brokers if broker_id != leader]
        brokers[followers[0]].kill_tree()
        wait_for(lambda: followers[0] not in state(zk_client, "u", 0).isr, 30, what="ISR of two")
        count = len(load.acked)
        wait_for(lambda: len(load.acked) >= count + 50, 30, what="acknowledgements with an ISR of two")
        brokers[followers[1]].kill_tree()
        wait_for(lambda: state(zk_client, "u", 0).isr == (leader,), 30, what="ISR of the leader alone")
        time.sleep(0.5)
        acked_with_one = len(load.acked)
        time.sleep(1.5)
        assert len(load.acked) == acked_with_one, "acknowledged with durability 2 below min.insync.replicas"
        assert ErrorCode.NOT_ENOUGH_REPLICAS in load.errors
        # The last replica standing dies too: with unclean election off, a follower
        # that comes back (it lacks acknowledged writes) is not elected.
        brokers[leader].kill_tree()
        brokers[followers[0]].start()
        wait_for(lambda: not zk_client.exists(layout.broker_path(leader)), 30, what="the leader's session gone")
        wait_for(lambda: state(zk_client, "u", 0).leader == NO_LEADER, 10, what="the partition offline")
        time.sleep(2)  # a few controller rounds: still nobody the ISR vouches for
        assert state(zk_client, "u", 0).leader == NO_LEADER and state(zk_client, "u", 0).isr == (leader,)
        # The last ISR member comes back: it leads again, with everything acknowledged.
        brokers[leader].start()
        wait_for(lambda: state(zk_client, "u", 0).leader == leader, 30, what="the last ISR member leading again")
        brokers[followers[1]].start()
    _, port = leader_port(zk_client, brokers, "u", 0)
    wait_for(lambda: port is not None, 1)
    check_read_back(port, "u", load.acked)
