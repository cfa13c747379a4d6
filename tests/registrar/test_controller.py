"""The controller (mpbroker.registrar.controller) on a real ZooKeeper: one controller
at a time with a growing epoch, first states for a new topic, failover of leaders when
a broker's session ends, a stale controller that can neither overwrite a newer
state nor keep acting, and brokers that registered again unseen (bounced: their
czxid changed between rounds, differs from the broker epoch the state names for the
leader or an ISR member, or is newer than the state), even during the round that
writes the state, for a new controller too. Then the same
with three real brokers: the controller runs in a broker's registrar, and SIGKILL of
the controller's broker moves both the controllership and that broker's leaderships."""

import json

import pytest
from kazoo.exceptions import ConnectionLoss

from mpbroker.registrar.controller import Controller
from mpbroker.registrar.replica_roles import ReplicaRoles
from mpbroker.registry import layout, replication, topic_admin
from mpbroker.registry.replication import NO_LEADER, PartitionState
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import wait_for


@pytest.fixture
def sessions(zk_connect):
    """``open(broker_id)``: a ZooKeeper session of its own holding /brokers/ids/<id>, as a
    live broker's registrar does (closing it is the broker's death)."""
    clients = []

    def open_session(broker_id: int):
        client = start_client(zk_connect, 6000, 30_000)
        client.create(layout.broker_path(broker_id), b"x:127.0.0.1:1", ephemeral=True, makepath=True)
        clients.append(client)
        return client

    yield open_session
    for client in clients:
        if client.connected:
            close_client(client)


def states(client, topic: str, partitions: int) -> list:
    result = []
    for partition in range(partitions):
        try:
            value, _ = client.get(replication.partition_state_path(topic, partition))
        except Exception:  # noqa: BLE001 - not written yet
            result.append(None)
            continue
        result.append(replication.parse_partition_state(topic, partition, value))
    return result


def broker_epoch(client, broker_id: int) -> int:
    """Broker ``broker_id``'s broker epoch now: the czxid of its registration."""
    return client.exists(layout.broker_path(broker_id)).czxid


def elected(client, leader: int, leader_epoch: int, isr, controller_epoch: int) -> PartitionState:
    """The state the controller writes for ``leader`` and ``isr``: their broker epochs
    as registered now."""
    return PartitionState(leader, leader_epoch, tuple(isr), controller_epoch, broker_epoch(client, leader),
                          {member: broker_epoch(client, member) for member in isr})


def next_round(controller) -> None:
    """Run a controller round now (a topic gets first states from its second round on)."""
    controller._next_round = 0
    controller.step()


def test_one_controller_first_states_and_failover(sessions):
    first, second, third = sessions(1), sessions(2), sessions(3)
    controllers = [Controller(client, broker_id) for broker_id, client in ((1, first), (2, second), (3, third))]
    assignment = topic_admin.create_topic(first, "t", 6, 3)
    for controller in controllers:
        controller.step()
    assert [controller.active for controller in controllers] == [True, False, False]
    assert states(first, "t", 6) == [None] * 6  # the brokers learn the topic is replicated first
    next_round(controllers[0])
    assert first.get(replication.CONTROLLER_EPOCH)[0] == b"1"
    assert json.loads(first.get(replication.CONTROLLER)[0])["brokerid"] == 1
    assert states(first, "t", 6) == [elected(first, assignment[p][0], 0, assignment[p], 1) for p in range(6)]

    close_client(first)  # broker 1 dies: its session, its registration and /controller go
    wait_for(lambda: not second.exists(replication.CONTROLLER), 10, what="/controller gone")
    for controller in controllers[1:]:
        controller.step()
    assert [controller.active for controller in controllers[1:]] == [True, False]
    assert second.get(replication.CONTROLLER_EPOCH)[0] == b"2"
    for partition, state in enumerate(states(second, "t", 6)):
        replicas = assignment[partition]
        assert 1 not in state.isr and state.controller_epoch == 2
        assert state.leader_broker_epoch == broker_epoch(second, state.leader)
        if replicas[0] == 1:  # its leader died: the next in the assignment, from the ISR
            assert state.leader == replicas[1] and state.leader_epoch == 1
        else:
            assert state.leader == replicas[0] and state.leader_epoch == 1  # only the ISR shrank


def test_a_stale_controller_cannot_overwrite_a_newer_state(sessions):
    old_session, new_session = sessions(1), sessions(2)
    topic_admin.create_topic(old_session, "t", 1, 2)
    old = Controller(old_session, 1)
    old.step()
    next_round(old)
    assert old.active and old.epoch == 1
    # A newer controller took over meanwhile (the old one was paused past its session,
    # say): its /controller node and epoch 2, and a state it wrote.
    old_session.delete(replication.CONTROLLER)
    new = Controller(new_session, 2)
    new.step()
    assert new.active and new.epoch == 2
    path = replication.partition_state_path("t", 0)
    newer = PartitionState(2, 9, (2,), 2)
    new_session.set(path, newer.value())
    old.step()  # it finds /controller is not its own: resigns, writes nothing
    assert not old.active
    assert replication.parse_partition_state("t", 0, new_session.get(path)[0]) == newer
    # Even acting with its old epoch on a state of the newer controller, it resigns.
    old.epoch = 1
    old._elect_partition("t", 0, [1, 2], {1: old_session.exists(layout.broker_path(1)).czxid}, may_start=True)
    assert not old.active
    assert replication.parse_partition_state("t", 0, new_session.get(path)[0]) == newer


def test_no_live_isr_member_leaves_the_partition_offline_until_one_is_back(sessions):
    by_id = {1: sessions(1), 2: sessions(2)}
    topic_admin.create_topic(by_id[1], "t", 1, 2)  # placed over brokers 1 and 2
    observer = sessions(9)  # the controller's broker, not a replica
    leader, follower = replication.parse_assignment("t", observer.get(layout.topic_path("t"))[0])[0]
    controller = Controller(observer, 9)
    controller.step()
    next_round(controller)
    assert states(observer, "t", 1)[0] == elected(observer, leader, 0, (leader, follower), 1)
    close_client(by_id[follower])  # the follower dies first: the ISR shrinks to the leader
    wait_for(lambda: topic_admin.live_brokers(observer) == sorted([leader, 9]), 10, what="the follower gone")
    controller.step()
    assert states(observer, "t", 1)[0] == elected(observer, leader, 1, (leader,), 1)
    last_life = broker_epoch(observer, leader)
    close_client(by_id[leader])  # then the last ISR member
    wait_for(lambda: topic_admin.live_brokers(observer) == [9], 10, what="both replicas gone")
    controller.step()  # the ISR kept, with the broker epoch it vouched for
    assert states(observer, "t", 1)[0] == PartitionState(NO_LEADER, 2, (leader,), 1, None, {leader: last_life})
    sessions(follower)  # the follower is back: it may lack acknowledged writes, so no leader
    wait_for(lambda: len(topic_admin.live_brokers(observer)) == 2, 10, what="the follower back")
    controller.step()
    assert states(observer, "t", 1)[0].leader == NO_LEADER
    sessions(leader)  # the last ISR member is back: elected
    wait_for(lambda: len(topic_admin.live_brokers(observer)) == 3, 10, what="the leader back")
    controller.step()
    assert states(observer, "t", 1)[0] == elected(observer, leader, 3, (leader,), 1)


def settled(sessions, assignment: dict, brokers=(1, 2, 3)) -> tuple:
    """``(by_id, observer, controller)``: a session per broker of ``brokers``, the
    controller's own (broker 9, not a replica), topic ``t`` placed as ``assignment``,
    and a controller that has run its first round and the next."""
    by_id = {broker_id: sessions(broker_id) for broker_id in brokers}
    observer = sessions(9)
    observer.create(layout.topic_path("t"), replication.assignment_value(assignment), makepath=True)
    controller = Controller(observer, 9)
    controller.step()
    next_round(controller)
    return by_id, observer, controller


def bounce(sessions, by_id: dict, broker_id: int, observer) -> None:
    """Broker ``broker_id`` dies and registers again before any controller looks."""
    close_client(by_id[broker_id])
    wait_for(lambda: not observer.exists(layout.broker_path(broker_id)), 10, what=f"broker {broker_id} gone")
    by_id[broker_id] = sessions(broker_id)


def test_a_broker_registered_again_between_rounds_is_bounced(sessions):
    by_id, observer, controller = settled(sessions, {0: [1, 2, 3], 1: [2, 1, 3]})
    assert states(observer, "t", 2) == [elected(observer, 1, 0, (1, 2, 3), 1), elected(observer, 2, 0, (2, 1, 3), 1)]
    bounce(sessions, by_id, 1, observer)
    controller.step()  # the same live ids, a new czxid for broker 1: a round at once
    # Its leadership goes to the next ISR member, and it leaves every ISR it was in.
    assert states(observer, "t", 2) == [elected(observer, 2, 1, (2, 3), 1), elected(observer, 2, 1, (2, 3), 1)]
    # It rejoins once caught up (its leader writes the ISR, with no broker epoch for
    # it): not bounced again (registered before that write).
    rejoined = elected(observer, 2, 1, (2, 3), 1).with_isr((2, 3, 1))
    observer.set(replication.partition_state_path("t", 0), rejoined.value())
    next_round(controller)
    assert states(observer, "t", 2)[0] == rejoined


def test_a_bounce_met_by_a_write_conflict_is_applied_at_the_next_round(sessions, monkeypatch):
    by_id, observer, controller = settled(sessions, {0: [1, 2, 3]})
    path = replication.partition_state_path("t", 0)
    bounce(sessions, by_id, 3, observer)
    real_set = observer.set

    rewritten = elected(observer, 1, 0, (1, 2, 3), 1)

    def leader_writes_first(node, value, version=-1):  # the leader's ISR write lands first
        real_set(node, rewritten.value())
        return real_set(node, value, version=version)

    monkeypatch.setattr(observer, "set", leader_writes_first)
    controller.step()  # BadVersion: and the state is now newer than broker 3's registration
    monkeypatch.undo()
    assert observer.exists(path).mzxid > observer.exists(layout.broker_path(3)).czxid
    assert states(observer, "t", 1) == [rewritten]
    next_round(controller)  # the bounce seen between rounds is still pending
    assert states(observer, "t", 1) == [elected(observer, 1, 1, (1, 2), 1)]


@pytest.mark.parametrize("failure", ["conflict", "connection loss"])
def test_a_write_conflict_keeps_a_bounce_pending_only_where_it_was_not_applied(sessions, monkeypatch, failure):
    by_id, observer, controller = settled(sessions, {0: [1, 2], 1: [1], 2: [2, 1]})
    conflicted = replication.partition_state_path("t", 2)
    bounce(sessions, by_id, 1, observer)
    real_set = observer.set
    rewritten = elected(observer, 2, 0, (2, 1), 1)

    def leader_writes_first(node, value, version=-1):  # partition 2's leader writes its state meanwhile
        if node == conflicted:
            real_set(node, rewritten.value())
            if failure == "connection loss":  # and the round ends there (the registrar retries)
                raise ConnectionLoss()
        return real_set(node, value, version=version)

    monkeypatch.setattr(observer, "set", leader_writes_first)
    if failure == "conflict":
        controller.step()  # partitions 0 and 1 written, partition 2 BadVersion
    else:
        with pytest.raises(ConnectionLoss):
            controller.step()
    monkeypatch.undo()
    handled = [elected(observer, 2, 1, (2,), 1), elected(observer, 1, 1, (1,), 1)]
    assert states(observer, "t", 3) == [*handled, rewritten]
    # Broker 1 catches up with partition 0's new leader, which writes it back into the ISR.
    rejoined = handled[0].with_isr((2, 1))
    observer.set(replication.partition_state_path("t", 0), rejoined.value())
    next_round(controller)  # only partition 2 is pending: it leaves that ISR, and nothing else moves
    assert states(observer, "t", 3) == [rejoined, handled[1], elected(observer, 2, 1, (2,), 1)]
    next_round(controller)
    assert states(observer, "t", 3) == [rejoined, handled[1], elected(observer, 2, 1, (2,), 1)]


@pytest.mark.parametrize("older_state", [False, True])
def test_a_new_controller_finds_a_leader_registered_after_its_state(sessions, older_state):
    by_id, observer, first = settled(sessions, {0: [1, 2, 3]})
    assert states(observer, "t", 1) == [elected(observer, 1, 0, (1, 2, 3), 1)]
    if older_state:  # written by older code: no leader_broker_epoch
        observer.set(replication.partition_state_path("t", 0), PartitionState(1, 0, (1, 2, 3), 1).value())
    first.resign()
    bounce(sessions, by_id, 1, observer)  # while no controller looks
    # No round before: only the state tells (the leader's broker epoch it names, or,
    # in an older state, its mzxid below the leader's registration).
    second = Controller(observer, 9)
    second.step()
    assert second.epoch == 2
    assert states(observer, "t", 1) == [elected(observer, 2, 1, (2, 3), 2)]


def test_a_bounced_broker_alone_in_the_isr_leads_again_at_a_new_epoch(sessions):
    by_id, observer, controller = settled(sessions, {0: [1, 2]}, (1, 2))
    close_client(by_id[2])
    wait_for(lambda: not observer.exists(layout.broker_path(2)), 10, what="broker 2 gone")
    controller.step()
    old = elected(observer, 1, 1, (1,), 1)
    assert states(observer, "t", 1) == [old]
    bounce(sessions, by_id, 1, observer)
    controller.step()
    again = elected(observer, 1, 2, (1,), 1)
    assert again.leader_broker_epoch != old.leader_broker_epoch
    assert states(observer, "t", 1) == [again]
    next_round(controller)  # applied: nothing more
    assert states(observer, "t", 1) == [again]


def roles_of(client, broker_id: int) -> dict:
    """``{(topic, partition): (role, leader epoch)}`` as broker ``broker_id``'s registrar
    reads them under its current registration."""
    sent = {}

    def send(**fields):
        for entry in fields.get("partitions", []):
            sent[(entry["topic"], entry["partition"])] = (entry["role"], entry["leader_epoch"])

    ReplicaRoles(client, broker_id, send, broker_epoch=lambda: broker_epoch(client, broker_id)).step()
    return sent


def test_a_leader_that_registered_again_during_the_round_electing_it_does_not_lead(sessions, monkeypatch):
    by_id, observer, first = settled(sessions, {0: [1, 2, 3], 1: [1, 2]})
    assert states(observer, "t", 2) == [elected(observer, 1, 0, (1, 2, 3), 1), elected(observer, 1, 0, (1, 2), 1)]
    close_client(by_id[1])  # the leader dies: broker 2 is elected in both partitions
    wait_for(lambda: not observer.exists(layout.broker_path(1)), 10, what="broker 1 gone")
    stale = broker_epoch(observer, 2)  # what the round reads before it decides
    real_set = observer.set

    def bounced_before_the_write(node, value, version=-1):  # broker 2 restarts after the round's read
        if broker_epoch(observer, 2) == stale:
            bounce(sessions, by_id, 2, observer)
        return real_set(node, value, version=version)

    monkeypatch.setattr(observer, "set", bounced_before_the_write)
    first.step()
    monkeypatch.undo()
    fresh = broker_epoch(observer, 2)
    written = states(observer, "t", 2)
    assert [state[:4] for state in written] == [(2, 1, (2, 3), 1), (2, 1, (2,), 1)]
    # Written after broker 2's new registration (the mzxid rule would let it lead), but
    # naming the registration the controller read: broker 2 does not lead under them.
    path = replication.partition_state_path("t", 0)
    assert observer.exists(path).mzxid > fresh
    assert [(state.leader_broker_epoch, state.isr_broker_epoch(2)) for state in written] == [(stale, stale)] * 2
    assert roles_of(by_id[2], 2) == {("t", 0): ("offline", 1), ("t", 1): ("offline", 1)}

    first.resign()
    second = Controller(observer, 9)  # a new controller: no round before, only the states tell
    second.step()
    assert second.epoch == 2
    assert states(observer, "t", 2) == [elected(observer, 3, 2, (3,), 2),  # moved
                                        elected(observer, 2, 2, (2,), 2)]  # the only live ISR member
    assert broker_epoch(observer, 2) == fresh
    assert roles_of(by_id[2], 2) == {("t", 0): ("follower", 2), ("t", 1): ("leader", 2)}
    next_round(second)  # rewritten with its broker epoch: not bounced any more
    assert states(observer, "t", 2) == [elected(observer, 3, 2, (3,), 2), elected(observer, 2, 2, (2,), 2)]


def test_a_new_controller_finds_an_isr_member_registered_again_during_the_round_writing_its_state(
        sessions, monkeypatch):
    by_id, observer, first = settled(sessions, {0: [1, 2, 3]})
    close_client(by_id[1])  # the leader dies: broker 2 is elected, broker 3 stays in the ISR
    wait_for(lambda: not observer.exists(layout.broker_path(1)), 10, what="broker 1 gone")
    stale = broker_epoch(observer, 3)  # what the round reads before it decides
    real_set = observer.set

    def bounced_before_the_write(node, value, version=-1):  # broker 3 restarts after the round's read
        if broker_epoch(observer, 3) == stale:
            bounce(sessions, by_id, 3, observer)
        return real_set(node, value, version=version)

    monkeypatch.setattr(observer, "set", bounced_before_the_write)
    first.step()
    monkeypatch.undo()
    path = replication.partition_state_path("t", 0)
    # Written after broker 3's new registration: by the mzxid rule the state vouches for it.
    assert observer.exists(path).mzxid > broker_epoch(observer, 3) != stale
    assert states(observer, "t", 1)[0][:4] == (2, 1, (2, 3), 1)

    first.resign()  # the controller's broker fails over before its next round
    second = Controller(observer, 9)  # a new controller: no round before, only the state tells
    second.step()
    assert second.epoch == 2
    assert states(observer, "t", 1)[0][:4] == (2, 2, (2,), 2)  # broker 3 is out of the ISR
    assert states(observer, "t", 1) == [elected(observer, 2, 2, (2,), 2)]


def test_the_controller_runs_in_a_brokers_registrar_and_fails_over(broker_factory, zk_connect):
    brokers = {i: broker_factory(f"b{i}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=i,
                                 zk_sessiontimeout_ms=4000) for i in (1, 2, 3)}
    client = start_client(zk_connect, 6000, 30_000)
    try:
        wait_for(lambda: topic_admin.live_brokers(client) == [1, 2, 3], 20, what="three brokers registered")
        assignment = topic_admin.create_topic(client, "t", 6, 3)
        wait_for(lambda: None not in states(client, "t", 6), 20, what="every partition has a leader")
        controller_id = json.loads(client.get(replication.CONTROLLER)[0])["brokerid"]
        status = brokers[controller_id].status()
        assert status["zookeeper"]["controller_epoch"] == 1
        assert all(state.isr == tuple(assignment[p]) and state.leader == assignment[p][0]
                   for p, state in enumerate(states(client, "t", 6)))

        brokers[controller_id].kill_tree()  # its session ends after zk.sessiontimeout.ms

        def failed_over():
            now = states(client, "t", 6)
            return client.get(replication.CONTROLLER_EPOCH)[0] == b"2" and all(
                controller_id not in state.isr and state.leader != controller_id for state in now)

        wait_for(failed_over, 30, what="a new controller and new leaders")
        survivors = sorted(set(brokers) - {controller_id})
        assert json.loads(client.get(replication.CONTROLLER)[0])["brokerid"] in survivors
        for partition, state in enumerate(states(client, "t", 6)):
            expected = [b for b in assignment[partition] if b != controller_id]
            assert state.leader == expected[0] and sorted(state.isr) == sorted(expected)
    finally:
        close_client(client)


@pytest.mark.parametrize("setting, unclean", [(None, False), ("true", True)])
def test_unclean_election_is_off_unless_configured(zk_connect, tmp_path, setting, unclean):
    from mpbroker.config.broker_config import config_from_properties
    from mpbroker.ipc.control import ControlChannel
    from mpbroker.ipc.slot_table import SlotTable
    from mpbroker.registrar.registrar import Registrar

    properties = {"log.dir": str(tmp_path), "enable.zookeeper": "true", "zk.connect": zk_connect, "brokerid": "7"}
    if setting is not None:
        properties["unclean.leader.election.enable"] = setting
    config, _ = config_from_properties(properties)
    _, channel = ControlChannel.pair()
    registrar = Registrar(config, 9092, [], SlotTable(2), 0, channel, layout.creator_id())
    registrar._connect()  # the client and the controller the registrar's steps drive
    try:
        assert registrar.controller.unclean is unclean
    finally:
        registrar._close()
