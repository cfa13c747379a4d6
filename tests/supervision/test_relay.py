"""Relay: the control messages the supervisor passes between its children."""

from mpbroker.ipc.control import Op
from mpbroker.supervision.relay import TO_REGISTRAR, Relay


class FakeChannel:
    def __init__(self):
        self.sent = []

    def send(self, op, **fields):
        self.sent.append((op, fields))
        return True


class FakeChild:
    def __init__(self, slot, ready=True, alive=True):
        self.slot = slot
        self.ready = ready
        self.alive = alive
        self.channel = FakeChannel()


def make_relay(num_workers=2, registrar=True):
    workers = [FakeChild(slot) for slot in range(num_workers)]
    return Relay(workers, FakeChild(num_workers), FakeChild(num_workers + 1) if registrar else None)


def test_messages_for_zookeeper_go_to_a_live_registrar_only():
    relay = make_relay()
    assert Op.ISR_CHANGE in TO_REGISTRAR and Op.ROLES not in TO_REGISTRAR
    relay.to_registrar(Op.CREATE_TOPIC, {"op": Op.CREATE_TOPIC, "topic": "t"})
    assert relay.registrar.channel.sent == [(Op.CREATE_TOPIC, {"topic": "t"})]
    relay.registrar.alive = False
    relay.to_registrar(Op.ISR_CHANGE, {"op": Op.ISR_CHANGE, "topic": "t"})
    assert len(relay.registrar.channel.sent) == 1
    make_relay(registrar=False).to_registrar(Op.ISR_CHANGE, {"op": Op.ISR_CHANGE})  # no registrar: dropped


def test_roles_go_to_their_workers_and_the_topics_to_the_acceptor():
    relay = make_relay()
    entries = [{"topic": "t", "partition": p, "role": "leader"} for p in range(4)]
    assert relay.from_registrar(Op.ROLES, {"op": Op.ROLES, "topics": {"t": 4}, "partitions": entries, "seq": 7})
    for worker in relay.workers:
        [(op, fields)] = worker.channel.sent
        assert op == Op.ROLES and fields["seq"] == 7
        assert all(relay.roles.owner(e["topic"], e["partition"]) == worker.slot for e in fields["partitions"])
    assert relay.acceptor.channel.sent == [(Op.ROLES, {"topics": {"t": 4}})]


def test_a_ready_child_gets_what_was_kept_for_it():
    relay = make_relay()
    relay.acceptor.ready = False
    relay.from_registrar(Op.ROLES, {"op": Op.ROLES, "topics": {"t": 1},
                                    "partitions": [{"topic": "t", "partition": 0, "role": "leader"}], "seq": 3})
    relay.from_registrar(Op.CLUSTER, {"op": Op.CLUSTER, "brokers": [[1, "h", 9092]], "controller": 1})
    assert relay.acceptor.channel.sent == []
    relay.acceptor.ready = True
    relay.acceptor_ready()
    assert relay.acceptor.channel.sent == [(Op.ROLES, {"topics": {"t": 1}}),
                                           (Op.CLUSTER, {"brokers": [[1, "h", 9092]], "controller": 1})]
    owner = relay.workers[relay.roles.owner("t", 0)]
    owner.channel.sent.clear()
    relay.worker_ready(owner)
    assert owner.channel.sent == [(Op.ROLES, {"partitions": [{"topic": "t", "partition": 0, "role": "leader"}],
                                              "seq": 3})]


def test_topic_settings_go_to_every_live_worker_and_deletions_to_the_acceptor():
    relay = make_relay()
    relay.workers[1].alive = False
    relay.from_registrar(Op.TOPIC_CONFIG, {"op": Op.TOPIC_CONFIG, "topic": "t"})
    assert relay.workers[0].channel.sent == [(Op.TOPIC_CONFIG, {"topic": "t"})] and relay.workers[1].channel.sent == []
    relay.from_registrar(Op.TOPICS_DELETED, {"op": Op.TOPICS_DELETED, "topics": ["t"]})
    assert relay.acceptor.channel.sent == [(Op.TOPICS_DELETED, {"topics": ["t"]})]


def test_what_the_registrar_says_of_itself_is_not_relayed():
    relay = make_relay()
    assert not relay.from_registrar(Op.ZK_STATE, {"op": Op.ZK_STATE, "registered": True})
    assert not relay.from_registrar(Op.CHECKED, {"op": Op.CHECKED, "zookeeper": True})
    assert all(not child.channel.sent for child in (*relay.workers, relay.acceptor, relay.registrar))
