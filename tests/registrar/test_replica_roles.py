"""This broker's roles as its registrar reads them (mpbroker.registrar.replica_roles), on a
real ZooKeeper: it leads only under a state naming its current registration (its
broker epoch, the czxid ``BrokerRegistration`` records, in ``leader_broker_epoch``),
or, for a state without it, one written after that registration; a state of a
previous life leaves the partition offline here until the controller writes a new
one. Following another broker needs no such wait."""

import pytest

from mpbroker.registrar.broker_registration import BrokerRegistration
from mpbroker.registrar.replica_roles import ReplicaRoles
from mpbroker.registry import layout, replication
from mpbroker.registry.replication import PartitionState
from mpbroker.registry.zk_client import close_client, start_client


@pytest.fixture
def admin(zk_client):
    """The controller's and the other brokers' writes."""
    return zk_client


def broker_1(client) -> BrokerRegistration:
    """Broker 1's registration on ``client``'s session (``register()`` not yet called)."""
    return BrokerRegistration(client, layout.BrokerInfo(1, "test-1", "127.0.0.1", 9092))


def roles_of(client, registration):
    """A ReplicaRoles for broker 1 and ``read()``: the last entry sent per partition."""
    sent = {}

    def send(**fields):
        for entry in fields.get("partitions", []):
            sent[(entry["topic"], entry["partition"])] = entry

    roles = ReplicaRoles(client, 1, send, broker_epoch=lambda: registration.broker_epoch)

    def read():
        roles.step()
        return {key: (entry["role"], entry["leader_epoch"]) for key, entry in sent.items()}

    return read


def test_a_broker_leads_only_under_a_state_written_after_its_registration(zk_connect, admin):
    client = start_client(zk_connect, 6000, 30_000)
    try:
        admin.create(layout.broker_path(2), b"x:127.0.0.1:9093", ephemeral=True, makepath=True)
        admin.create(layout.topic_path("t"), replication.assignment_value({0: [1, 2], 1: [2, 1]}), makepath=True)
        led = replication.partition_state_path("t", 0)
        admin.create(led, PartitionState(1, 3, (1, 2), 1).value(), makepath=True)  # from a previous life
        admin.create(replication.partition_state_path("t", 1), PartitionState(2, 0, (2, 1), 1).value(),
                     makepath=True)
        registration = broker_1(client)
        read = roles_of(client, registration)
        assert registration.broker_epoch is None
        assert read() == {("t", 0): ("offline", 3), ("t", 1): ("follower", 0)}  # not registered yet

        registration.register()
        assert registration.broker_epoch == client.exists(layout.broker_path(1)).czxid
        assert read() == {("t", 0): ("offline", 3), ("t", 1): ("follower", 0)}  # the state is older

        admin.set(led, PartitionState(1, 4, (1,), 1).value())  # the controller saw the bounce
        assert read() == {("t", 0): ("leader", 4), ("t", 1): ("follower", 0)}
        admin.set(led, PartitionState(1, 4, (1, 2), 1).value())  # its own ISR change: still its own
        assert read()[("t", 0)] == ("leader", 4)

        # A new session registers anew: a new broker epoch, and the state is old again.
        close_client(client)
        client = start_client(zk_connect, 6000, 30_000)
        registration = broker_1(client)
        registration.register()
        read = roles_of(client, registration)
        assert read() == {("t", 0): ("offline", 4), ("t", 1): ("follower", 0)}
    finally:
        close_client(client)


def test_a_state_naming_the_leaders_broker_epoch_is_led_only_by_that_registration(zk_connect, admin):
    client = start_client(zk_connect, 6000, 30_000)
    try:
        admin.create(layout.topic_path("t"), replication.assignment_value({0: [1, 2]}), makepath=True)
        led = replication.partition_state_path("t", 0)
        registration = broker_1(client)
        registration.register()
        old = registration.broker_epoch
        admin.create(led, PartitionState(1, 3, (1, 2), 1, old).value(), makepath=True)
        assert roles_of(client, registration)() == {("t", 0): ("leader", 3)}

        # The broker registers again after the controller read its registration, before
        # the controller wrote: the state is newer than the registration, but names the old one.
        close_client(client)
        client = start_client(zk_connect, 6000, 30_000)
        registration = broker_1(client)
        registration.register()
        assert registration.broker_epoch != old
        admin.set(led, PartitionState(1, 4, (1, 2), 1, old).value())
        assert admin.exists(led).mzxid > registration.broker_epoch
        read = roles_of(client, registration)
        assert read() == {("t", 0): ("offline", 4)}

        admin.set(led, PartitionState(1, 5, (1,), 1, registration.broker_epoch).value())  # the controller's next
        assert read() == {("t", 0): ("leader", 5)}
        # A state without the field (older code's): the mzxid rule, written after the registration.
        admin.set(led, PartitionState(1, 6, (1,), 1).value())
        assert read() == {("t", 0): ("leader", 6)}
    finally:
        close_client(client)


def test_a_leaders_isr_change_keeps_the_broker_epochs_of_the_members_that_stay(zk_connect, admin):
    client = start_client(zk_connect, 6000, 30_000)
    try:
        admin.create(layout.topic_path("t"), replication.assignment_value({0: [1, 2, 3]}), makepath=True)
        registration = broker_1(client)
        registration.register()
        own = registration.broker_epoch
        led = replication.partition_state_path("t", 0)
        admin.create(led, PartitionState(1, 3, (1, 3), 1, own, {1: own, 3: 77}).value(), makepath=True)
        roles = ReplicaRoles(client, 1, lambda **fields: None, broker_epoch=lambda: registration.broker_epoch)

        def request_isr(isr):
            roles.request_isr({"topic": "t", "partition": 0, "leader_epoch": 3, "isr": isr,
                               "version": admin.exists(led).version})
            return replication.parse_partition_state("t", 0, admin.get(led)[0])

        # Broker 2 joins: no broker epoch for it (which registration caught up is not
        # known here), broker 3 keeps the one the controller recorded.
        assert request_isr([1, 3, 2]) == PartitionState(1, 3, (1, 3, 2), 1, own, {1: own, 3: 77})
        assert request_isr([1, 2]) == PartitionState(1, 3, (1, 2), 1, own, {1: own})  # broker 3 leaves: its too
        assert roles_of(client, registration)() == {("t", 0): ("leader", 3)}
    finally:
        close_client(client)


def test_each_entry_carries_its_topics_format(zk_connect, admin):
    client = start_client(zk_connect, 6000, 30_000)
    try:
        admin.create(layout.broker_path(2), b"x:127.0.0.1:9093", ephemeral=True, makepath=True)
        admin.create(layout.topic_path("modern"), replication.assignment_value({0: [1, 2]}, record_batches=True),
                     makepath=True)
        admin.create(layout.topic_path("old"), replication.assignment_value({0: [2, 1]}), makepath=True)
        admin.create(replication.partition_state_path("modern", 0), PartitionState(2, 0, (2, 1), 1).value(),
                     makepath=True)
        sent = {}
        roles = ReplicaRoles(client, 1, lambda **fields: sent.update(
            {entry["topic"]: entry for entry in fields.get("partitions", [])}), broker_epoch=lambda: None)
        roles.step()
        assert sent["modern"]["record_batches"] is True and sent["modern"]["role"] == "follower"
        assert sent["old"]["record_batches"] is False and sent["old"]["role"] == "offline"
    finally:
        close_client(client)
