"""The registrar writes the ISR changes its broker's leaders ask for and sends the new
roles back once per round of control messages, not once per change (a real ZooKeeper,
the registrar's own handlers). A roles read reads every partition's state: after a
heal the leaders of a broker ask for dozens of changes at once (the offsets topic's 50
partitions), one read each kept the registrar from its heartbeat for 10 s in fault
schedule 301600636, the supervisor killed it, and the broker's new registration made
the controller move its leaderships: the first durability-2 acknowledgement after the
heal came 28 s later, or not within the schedule's 30 s."""

from mpbroker.config.broker_config import config_from_properties
from mpbroker.ipc.control import ControlChannel, Op
from mpbroker.ipc.slot_table import SlotTable
from mpbroker.registrar.registrar import Registrar
from mpbroker.registry import layout, replication
from mpbroker.registry.replication import PartitionState
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import wait_for

PARTITIONS = 12


def test_isr_changes_asked_together_are_sent_back_in_one_roles_message(zk_connect, tmp_path):
    config, _ = config_from_properties({"log.dir": str(tmp_path), "enable.zookeeper": "true",
                                        "zk.connect": zk_connect, "brokerid": "7"})
    supervisor, channel = ControlChannel.pair()
    registrar = Registrar(config, 9092, [], SlotTable(2), 0, channel, layout.creator_id())
    admin = start_client(zk_connect, 6000, 30_000)
    registrar._connect()
    try:
        wait_for(lambda: registrar.client.connected, 30, what="the registrar's session")
        registrar.registration.register()
        epoch = registrar.registration.broker_epoch
        admin.create(layout.topic_path("t"), replication.assignment_value(
            {partition: [7, 8] for partition in range(PARTITIONS)}), makepath=True)
        for partition in range(PARTITIONS):
            admin.create(replication.partition_state_path("t", partition),
                         PartitionState(7, 0, (7,), 1, leader_broker_epoch=epoch).value(), makepath=True)
        registrar.roles.step()  # the roles as the workers have them: broker 7 leads every partition alone
        supervisor.receive_all()

        for partition in range(PARTITIONS):  # one round of control messages: every leader caught a follower up
            registrar._on_isr_change({"topic": "t", "partition": partition, "leader_epoch": 0, "isr": [7, 8],
                                      "version": 0})
        registrar.after_events()

        roles = [message for message in supervisor.receive_all() if message["op"] == Op.ROLES]
        assert len(roles) == 1, f"{len(roles)} roles messages (one full read of the states each)"
        assert sorted(entry["partition"] for entry in roles[0]["partitions"]) == list(range(PARTITIONS))
        assert all(entry["isr"] == [7, 8] for entry in roles[0]["partitions"])
        for partition in range(PARTITIONS):
            value, _ = admin.get(replication.partition_state_path("t", partition))
            assert replication.parse_partition_state("t", partition, value).isr == (7, 8)
    finally:
        registrar._close()
        close_client(admin)
        supervisor.close()
