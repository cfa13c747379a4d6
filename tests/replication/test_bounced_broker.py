"""A leader that bounces: SIGKILLed, its unflushed tail lost as in a power cut, and
restarted at once, on three real brokers (RF 3, min.insync.replicas 2, durability 2).

The restarted broker waits for its old registration to expire (its creator id is new)
and registers again a few hundred milliseconds later. The controller looks at
``/brokers/ids`` once per registrar step (250 ms), so it may miss the id's absence;
this test makes it miss it (the controller's registrar is paused from the deletion
until the new node is there). Then only the registration's czxid (the broker epoch,
KIP-380) tells it that the broker bounced. The bounced broker's log is shorter than
what it acknowledged (a durability-2 acknowledgement waits for the ISR's log ends, not
for an fsync, and these brokers never flush on their own), so it must not lead the
epoch it led before with that log: its followers would truncate to it (KIP-279) and
the acknowledged messages would be gone. Every acknowledged message must read back
once, in order, and the replicas must end byte-identical."""

import json
import os
import signal
import threading
import time

from kazoo.protocol.states import EventType

from mpbroker.codec.errors import ErrorCode
from mpbroker.registry import layout, replication
from mpbroker.segments.naming import list_segment_bases, partition_dir_name, segment_file_name
from mpbroker.segments.recovery_points import is_checkpoint_file, read_checkpoint
from tests.clients.helpers import wait_for
from tests.replication.cluster import (
    check_read_back,
    leader_port,
    produce,
    produce_until_acked,
    read_all,
    start_cluster,
    state,
    wait_identical,
)

TOPIC = "pc"
SETS = 40  # acknowledged sets before the power cut
LOST = 20  # of which the leader's disk keeps only the first SETS - LOST
NO_FLUSH = {"log_flush_interval": 1_000_000, "log_default_flush_interval_ms": 3_600_000}


def recovery_point(broker, topic: str, partition: int):
    """The highest recovery point any of the broker's checkpoint files holds, or None."""
    points = []
    for name in os.listdir(broker.log_dir):
        if is_checkpoint_file(name) and not name.endswith(".tmp"):
            found = read_checkpoint(os.path.join(broker.log_dir, name)) or {}
            if (topic, partition) in found:
                points.append(found[(topic, partition)])
    return max(points, default=None)


def power_cut(broker, topic: str, partition: int, keep: int) -> int:
    """Lose every byte of the partition's log at or past offset ``keep`` on ``broker``'s
    disk (the segment holding it cut there, later ones gone): what a power cut takes from
    data no fsync covered. Returns how many bytes went."""
    directory = os.path.join(broker.log_dir, partition_dir_name(topic, partition))
    lost = 0
    for base in list_segment_bases(directory):
        path = os.path.join(directory, segment_file_name(base))
        size = os.path.getsize(path)
        if base + size <= keep:
            continue
        if base >= keep:
            os.unlink(path)
            lost += size
        else:
            os.truncate(path, keep - base)
            lost += base + size - keep
    return lost


def pause_while_away(client, broker_id: int, pid: int, paused: threading.Event) -> None:
    """SIGSTOP ``pid`` the moment ``/brokers/ids/<broker_id>`` is deleted (a kazoo watch)."""
    def on_event(event):
        if event.type == EventType.DELETED:
            os.kill(pid, signal.SIGSTOP)
            paused.set()

    assert client.exists(layout.broker_path(broker_id), watch=on_event)


def test_a_leader_bounced_after_a_power_cut_loses_no_acknowledged_message(broker_factory, zk_connect, zk_client):
    brokers = start_cluster(broker_factory, zk_connect, min_insync_replicas=2, **NO_FLUSH)
    paused = threading.Event()
    controller_pid = None
    try:
        value = wait_for(lambda: zk_client.exists(replication.CONTROLLER) and zk_client.get(replication.CONTROLLER)[0],
                         30, what="a controller")
        controller = json.loads(value)["brokerid"]
        # The leader is another broker: the controller sees it go (or not) from outside.
        leader = min(broker_id for broker_id in brokers if broker_id != controller)
        replicas = [leader] + [broker_id for broker_id in brokers if broker_id != leader]
        zk_client.create(layout.topic_path(TOPIC), replication.assignment_value({0: replicas}), makepath=True)
        assert produce_until_acked(zk_client, brokers, TOPIC, 0, [b"first"])[0] == leader
        wait_for(lambda: set(state(zk_client, TOPIC, 0).isr) == set(brokers), 30, what="a full ISR")
        before = state(zk_client, TOPIC, 0)
        acked = [b"first"]
        acks = []
        for number in range(SETS):
            payloads = [f"before {number}-{index}".encode() for index in range(5)]
            ack = produce(brokers[leader].port, TOPIC, 0, payloads)
            assert ack.error == ErrorCode.NO_ERROR, ack
            acked += payloads
            acks.append(ack)
        registered = zk_client.exists(layout.broker_path(leader))

        # SIGKILL of every process of the leader, then the power cut: the last LOST
        # acknowledged sets were only in its page cache (the followers have them).
        killed_at = time.monotonic()
        brokers[leader].kill_tree()
        cut = acks[SETS - LOST].offset
        point = recovery_point(brokers[leader], TOPIC, 0)
        assert point is None or point <= cut, f"the leader flushed up to {point}: a power cut keeps that"
        assert power_cut(brokers[leader], TOPIC, 0, cut) == acks[-1].next_offset - cut
        # Restarted at once, it waits for its old registration to expire (another
        # creator id) and registers again a few hundred ms later. The controller polls
        # every registrar step (250 ms), so it may or may not see the id missing: here
        # it does not (its registrar paused from the deletion until the new node is
        # there), and only the new czxid tells it that the broker bounced.
        controller_pid = brokers[controller].status()["registrar"]["pid"]
        pause_while_away(zk_client, leader, controller_pid, paused)
        brokers[leader].start()
        restarted_s = time.monotonic() - killed_at
        assert paused.is_set()
        os.kill(controller_pid, signal.SIGCONT)
        paused.clear()
        again = zk_client.exists(layout.broker_path(leader))
        assert again.czxid != registered.czxid

        for number in range(20):
            payloads = [f"after {number}-{index}".encode() for index in range(5)]
            produce_until_acked(zk_client, brokers, TOPIC, 0, payloads)
            acked += payloads

        wait_for(lambda: set(state(zk_client, TOPIC, 0).isr) == set(brokers), 60, what="a full ISR again")
        after = state(zk_client, TOPIC, 0)
        print(f"restarted in {restarted_s:.2f}s; state before {before}, after {after}")
        _, port = leader_port(zk_client, brokers, TOPIC, 0)
        try:  # the high watermark follows the followers' next fetches
            wait_for(lambda: len(read_all(port, TOPIC, 0)) >= len(acked), 10, what="everything visible")
        except AssertionError:
            pass  # check_read_back says what is missing
        check_read_back(port, TOPIC, acked)
        wait_identical(list(brokers.values()), TOPIC)
        assert after.leader_epoch > before.leader_epoch
    finally:
        if paused.is_set():
            os.kill(controller_pid, signal.SIGCONT)
