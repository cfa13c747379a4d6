"""The replicated topics' settings mirrored from ZooKeeper into log.dir
(``registrar.topic_settings``), on a real ZooKeeper: a topic's first step writes its
file (and announces it); a change of the node is seen through the watch at the next
step; a value the broker cannot take is left out; an unchanged node rewrites nothing;
and the roles step runs it before any role goes out."""

import os

from mpbroker.registrar.replica_roles import ReplicaRoles
from mpbroker.registrar.topic_settings import TopicSettings
from mpbroker.registry import layout, replication, topic_config_nodes
from mpbroker.segments import topic_configs
from tests.clients.helpers import wait_for


def set_settings(client, topic: str, configs: dict) -> None:
    path = topic_config_nodes.config_path(topic)
    value = topic_config_nodes.config_value(configs)
    if client.exists(path):
        client.set(path, value)
    else:
        client.create(path, value, makepath=True)


def test_settings_are_mirrored_and_changes_seen_through_the_watch(zk_client, tmp_path):
    log_dir = str(tmp_path)
    announced = []
    settings = TopicSettings(zk_client, log_dir, announced.append)
    set_settings(zk_client, "t", {"retention.ms": "60000", "segment.bytes": "2048"})
    settings.step({"t": 1, "bare": 1})  # "bare": no node, no settings: no file
    assert topic_configs.read(log_dir, "t") == {"configs": {"retention.ms": "60000", "segment.bytes": "2048"}}
    assert not os.path.exists(topic_configs.path(log_dir, "bare"))
    assert announced == ["t"]

    settings.step({"t": 1, "bare": 1})  # nothing changed: nothing read or written
    assert announced == ["t"]

    set_settings(zk_client, "t", {"retention.ms": "120000", "segment.ms": "soon"})  # a hand-written bad value
    set_settings(zk_client, "bare", {"min.insync.replicas": "2"})  # made: the exists watch sees it

    def stepped():
        settings.step({"t": 1, "bare": 1})
        return sorted(announced) == ["bare", "t", "t"]

    wait_for(stepped, 10, what="both changes seen")
    assert topic_configs.read(log_dir, "t") == {"configs": {"retention.ms": "120000"}}  # the bad one left out
    assert topic_configs.read(log_dir, "bare") == {"configs": {"min.insync.replicas": "2"}}

    # A new session's settings (forget) read everything again, and write only what differs.
    settings.forget()
    settings.step({"t": 1, "bare": 1})
    assert sorted(announced) == ["bare", "t", "t"]


def test_the_roles_step_mirrors_settings_before_any_role_goes_out(zk_client, tmp_path):
    log_dir = str(tmp_path)
    zk_client.create(layout.topic_path("t"), replication.assignment_value({0: [1]}), makepath=True)
    set_settings(zk_client, "t", {"min.insync.replicas": "3"})
    on_disk_when_sent = []

    def send(**fields):
        on_disk_when_sent.append(topic_configs.read(log_dir, "t"))

    roles = ReplicaRoles(zk_client, 1, send)
    roles.before_send = TopicSettings(zk_client, log_dir, lambda topic: None).step
    roles.step()
    assert on_disk_when_sent == [{"configs": {"min.insync.replicas": "3"}}]
