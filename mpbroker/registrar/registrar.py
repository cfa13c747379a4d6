"""The registrar: the supervisor's child that keeps this broker registered in ZooKeeper.

It runs only with ``enable.zookeeper=true``, in its own process because kazoo runs
threads and the supervisor must stay a single-threaded process that can fork.

Its life, driven by the supervisor over the control channel:
1. Connect and check that the broker id is free (``BrokerRegistration.check_id``),
   then tell the supervisor ``checked``; the supervisor starts the workers only
   then. An id held by a live broker ends the registrar with EXIT_ID_CONFLICT, and
   the supervisor refuses to start. If ZooKeeper does not answer within
   ``zk.connectiontimeout.ms`` it says ``checked`` anyway: the broker serves without
   ZooKeeper and the registrar keeps trying (the id is checked once it connects).
2. On ``register`` (the acceptor takes connections) write the id and every topic.
   Topics come from the workers' partition tables, scanned every TOPIC_SCAN_S, so a
   topic created by a produce is registered within about a second.
3. A new session (after an expiry, or ZooKeeper's data lost) writes everything again;
   the nodes are verified every VERIFY_S. A client kept away longer than twice the
   session timeout is replaced by a new one: a ZooKeeper that lost its data refuses a
   client that has seen newer transactions than its own, and kazoo would retry that
   same client for ever (the old session is expired by then anyway).
4. On ``stop`` (or TERM) delete the nodes and close the session.

While registered it also runs the controller (``controller``) on the same session:
one broker of the cluster elects the leaders of the replicated topics' partitions. A
stop resigns the controllership first, so another broker takes over at once. And it
reads this broker's replica roles (``replica_roles``), which the supervisor hands to
the workers, and writes the ISR changes the workers' leaders ask for. Before the roles
go out it mirrors the replicated topics' settings from ``/config/topics`` into
``log.dir`` (``topic_settings``); a change goes to the workers as ``topic_config``. Each
registration has a new broker epoch (the czxid of ``/brokers/ids/<id>``): the
controller treats a changed one as a bounce and names the leader's in the states
it writes, and this broker leads only under states naming its own (or, in a state
without the field, written after its registration).

The ZooKeeper lease: after each step whose reads succeeded it writes, in its slot of
the slot table, ``the step's start + 2/3 of zk.sessiontimeout.ms``. The session
cannot have expired before then (ZooKeeper heard from it after the step began), so
a leader that takes and acknowledges produces only within the lease never does so
after another broker may have been elected in its place: a broker paused past its
session (SIGSTOP, a long GC-like stall, a partition from ZooKeeper) stops
acknowledging the moment it runs again, before it even learns of the expiry.

Its state goes to the supervisor as ``zk_state`` messages, which ``mpbroker-ctl
status`` shows; the first one saying ``registered`` after ``register`` is what the
supervisor waits for (at most zk.connectiontimeout.ms) before it tells systemd READY=1.
"""

import logging
import time

from kazoo.protocol.states import KazooState

from mpbroker.clock import monotonic_ms
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.ipc import counters
from mpbroker.ipc.control import Op
from mpbroker.ipc.partition_table import published_partitions
from mpbroker.process.child import ChildProcess
from mpbroker.registrar import EXIT_ID_CONFLICT
from mpbroker.registrar.broker_registration import BrokerIdConflict, BrokerRegistration
from mpbroker.registrar.cluster_view import ClusterView
from mpbroker.registrar.controller import Controller
from mpbroker.registrar.replica_roles import ReplicaRoles
from mpbroker.registrar.topic_deleter import TopicDeleter
from mpbroker.registrar.topic_settings import TopicSettings
from mpbroker.registry import endpoints, layout, topic_admin
from mpbroker.registry.replication import PlacementError
from mpbroker.registry.zk_client import (
    TRANSIENT,
    ZK_ERRORS,
    ZooKeeperUnavailable,
    close_client,
    ensure_chroot,
    make_client,
)
from mpbroker.segments import topic_configs

log = logging.getLogger(__name__)

STEP_MS = 250
TOPIC_SCAN_S = 1.0
VERIFY_S = 30.0
CHROOT_TIMEOUT_S = 1.0
WARN_EVERY_S = 30.0
MIN_REPLACE_AFTER_S = 5.0


class Registrar(ChildProcess):
    def __init__(self, config, port: int, tables, slots, slot: int, channel, creator: str, counter_row=None,
                 kafka_port: int | None = None):
        super().__init__(slots, slot, channel)
        self.counter_row = counter_row  # the controller flag and epoch, for the metrics
        self.config = config
        self.tables = tables
        self.channel = channel
        self.info = layout.BrokerInfo(config.brokerid, creator, layout.hostname_for_registration(config.hostname),
                                      port)
        self.endpoint = None  # (path, value) of where this broker serves the modern protocol
        if kafka_port is not None:
            host = config.advertised_host_name or self.info.host
            advertised = config.advertised_port if config.advertised_port > 0 else kafka_port
            self.endpoint = (endpoints.endpoint_path(config.brokerid), endpoints.endpoint_value(host, advertised))
        self.cluster = None  # the cluster as modern clients are told it (cluster_view), made with each client
        self.client = None
        self.registration = None
        self.controller = None  # made with each client: the controller runs on the broker's session
        self.roles = None  # made with each client too
        self.settings = None  # the replicated topics' settings, mirrored into log.dir; with each client too
        self._roles_session = None  # the session the roles were last read under
        self.checked = False
        self.serving = False  # the supervisor said "register"
        self.conflict = False  # the broker id belongs to another live broker
        self._started = time.monotonic()
        self._reported = None
        self._next_scan = 0.0
        self._next_verify = 0.0
        self._last_warning = 0.0
        self._zk_state = "connecting"
        self._away_since = None  # monotonic time the client was first seen disconnected
        self._isr_written = False  # ISR changes written since the roles were last read (after_events)
        self.deleter = TopicDeleter(  # topic deletions: this broker's share, the controller's, DeleteTopics
            config.brokerid, lambda topic: channel.send(Op.DELETE_LOCAL, topic=topic),
            lambda number, results: channel.send(Op.TOPICS_DELETED, number=number, results=results))

    # --- the process (process.child.ChildProcess) --------------------------------

    def start(self):
        logging.getLogger("kazoo").setLevel(logging.ERROR)  # our own lines say what happens
        self.timers.every(STEP_MS, self._step)
        return None

    def control_handlers(self) -> dict:
        return {Op.REGISTER: self._on_register, Op.ISR_CHANGE: self._on_isr_change,
                Op.CREATE_TOPIC: self._on_create_topic,
                Op.DELETE_TOPICS: lambda message: self.deleter.request(message["number"], message["topics"],
                                                                       message["timeout_ms"]),
                Op.LOCAL_DELETED: lambda message: self.deleter.local_deleted(message["topic"])}

    def _on_create_topic(self, message: dict) -> None:
        """A produce named a topic no broker has, or a modern client's CreateTopics: create
        it replicated, placed over the live brokers (Kafka 0.8's auto-creation with
        default.replication.factor, or the factor asked for), in the record-batch format
        when a modern client named it, its settings (``configs``, checked by the
        acceptor) written with its assignment in one transaction."""
        if self.client is None or not self.client.connected:
            return  # the producer retries, and the acceptor asks again
        topic, partitions = message["topic"], message["partitions"]
        factor = message.get("replication_factor") or self.config.default_replication_factor
        record_batches = bool(message.get("record_batches", False))
        configs = message.get("configs") or {}
        try:
            topic_configs.check(configs)  # checked by the acceptor already: never write what no broker takes
            topic_admin.create_topic(self.client, topic, partitions, factor, record_batches=record_batches,
                                     configs=configs)
        except topic_admin.TopicExists:
            return
        except (PlacementError, InvalidTopicError, topic_configs.TopicConfigError) as exc:
            self._warn(f"cannot create topic {topic!r} with replication factor {factor}: {exc}")
            return
        except (ZooKeeperUnavailable, *ZK_ERRORS) as exc:
            self._warn(f"creating topic {topic!r} failed: {exc!r}")
            return
        log.info("created topic %r: %d partitions, replication factor %d%s%s", topic, partitions, factor,
                 ", record batches" if record_batches else "",
                 "".join(f", {name}={value}" for name, value in sorted(configs.items())))

    def _connected(self) -> bool:
        return self.roles is not None and self.client is not None and self.client.connected

    def _on_isr_change(self, message: dict) -> None:
        if not self._connected():
            return  # the leader asks again; its ISR stays as ZooKeeper has it
        try:
            self.roles.request_isr(message)
        except (ZooKeeperUnavailable, *ZK_ERRORS) as exc:
            self._warn(f"writing the ISR of {message.get('topic')}-{message.get('partition')} failed: {exc!r}")
            return
        # The new ISRs go to the workers once per round of control messages, not once
        # per change: a roles read is a read of every partition's state, and after a
        # heal the leaders ask for dozens of changes at once (one read each kept this
        # process from its heartbeat for 10 s in fault schedule 301600636, and the
        # supervisor killed it).
        self._isr_written = True

    def after_events(self) -> None:
        if not self._isr_written:
            return
        self._isr_written = False
        if not self._connected():
            return  # the next step reads them
        try:
            self.roles.step()
        except (ZooKeeperUnavailable, *ZK_ERRORS) as exc:
            self._warn(f"reading the roles after ISR changes failed: {exc!r}")

    def _on_register(self, _message: dict) -> None:
        self.serving = True
        self._next_scan = 0.0
        self._step()

    def finish(self) -> int:
        self.slots.renew_lease(self.slot, 0)  # this broker's leaders take and acknowledge nothing more
        if not self.conflict:
            self._deregister()
        self._close()
        log.info("stopped")
        return self.exit_code

    def _step(self, _now_ms: int = 0) -> None:
        if self.stopping:
            return
        try:
            if self.client is None:
                self._connect()
            if not self.client.connected:
                self.deleter.expire(time.monotonic())
                self._report_unreachable()
                self._report()  # status must show the disconnection too
                self._replace_client_kept_away()
                return
            self._away_since = None
            if not self.checked:
                self.registration.check_id(self.config.zk_sessiontimeout_ms * 1.5 / 1000 + 1)
                self.checked = True
                self.channel.send(Op.CHECKED, zookeeper=True)
            if self.serving:
                began = monotonic_ms()
                self._delete_topics()  # first: the topics marked for deletion are neither replicated nor registered
                self._read_roles()  # then: the topic scan leaves the replicated topics out
                self._register()
                if self.registration.registered_session is not None:  # only a live broker controls
                    self.controller.step()
                if self.registration.registered_session == self.client.client_id[0]:  # and leads
                    lease_ms = self.config.zk_sessiontimeout_ms * 2 // 3
                    self.slots.renew_lease(self.slot, began + lease_ms)
                if self.registration.registered_session is not None:  # after the lease: it waits on no read
                    self.cluster.step()  # what modern clients' Metadata tells of the cluster
        except (ZooKeeperUnavailable, *TRANSIENT) as exc:
            self._report_unreachable(exc)
        except BrokerIdConflict as exc:
            log.critical("%s", exc)
            self.conflict = True
            self.exit_with(EXIT_ID_CONFLICT)
            return
        except ZK_ERRORS as exc:  # the other ZooKeeper errors
            self._warn(f"ZooKeeper call failed: {exc!r}; retrying")
        self._report()

    def _delete_topics(self) -> None:
        self.deleter.step(self.client, self.registration, self.controller.active)
        self.roles.deleting = self.controller.deleting = self.cluster.deleting = self.deleter.marked

    def _read_roles(self) -> None:
        session = self.client.client_id[0]
        if session != self._roles_session:  # a new session: whatever it missed is sent again
            self.roles.forget()
            self.settings.forget()  # and its watches are gone
            self._roles_session = session
        self.roles.step()

    def _connect(self) -> None:
        ensure_chroot(self.config.zk_connect, CHROOT_TIMEOUT_S)
        self.client = make_client(self.config.zk_connect, self.config.zk_sessiontimeout_ms)
        self.client.add_listener(self._on_state)
        self.client.start_async()
        self.registration = BrokerRegistration(self.client, self.info)
        self.registration.endpoint = self.endpoint
        self.cluster = ClusterView(self.client, lambda **fields: self.channel.send(Op.CLUSTER, **fields))
        self.controller = Controller(self.client, self.config.brokerid,
                                     unclean=self.config.unclean_leader_election_enable)
        registration = self.registration
        self.roles = ReplicaRoles(self.client, self.config.brokerid,
                                  lambda **fields: self.channel.send(Op.ROLES, **fields),
                                  lambda seq: self.slots.set_roles_seq(self.slot, seq),
                                  lambda: registration.broker_epoch)
        self.settings = TopicSettings(self.client, self.config.log_dir,
                                      lambda topic: self.channel.send(Op.TOPIC_CONFIG, topic=topic))
        self.roles.before_send = self.settings.step

    def _replace_client_kept_away(self) -> None:
        now = time.monotonic()
        if self._away_since is None:
            self._away_since = now
            return
        limit = max(2 * self.config.zk_sessiontimeout_ms / 1000, MIN_REPLACE_AFTER_S)
        if now - self._away_since < limit:
            return
        log.warning("ZooKeeper at %s has not taken this client back for %.0fs (a server that lost its data "
                    "refuses clients that saw newer transactions); starting a new session",
                    self.config.zk_connect, now - self._away_since)
        self._close()
        self.registration = None
        self.controller = None
        self.roles = None
        self.settings = None
        self.cluster = None
        self._away_since = None
        self._next_scan = 0.0

    def _on_state(self, state) -> None:  # kazoo's thread: record and log only
        if self.stopping:
            return
        self._zk_state = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
                          KazooState.LOST: "session lost"}.get(state, str(state))
        if state == KazooState.LOST:
            log.warning("ZooKeeper session expired; registering again once reconnected")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection lost; still serving, reconnecting")
        else:
            log.info("connected to ZooKeeper at %s", self.config.zk_connect)

    def _register(self) -> None:
        now = time.monotonic()
        if now >= self._next_scan:
            self._next_scan = now + TOPIC_SCAN_S
            self.registration.add_topics(self._topics())
        if now >= self._next_verify and self.registration.registered_session is not None:
            self._next_verify = now + VERIFY_S
            self.registration.verify()
        self.registration.register()

    def _topics(self) -> dict:
        """The 0.7 topics of the partition tables (a replicated topic's nodes are the
        controller's: its partitions are not registered per broker)."""
        replicated = self.roles.replicated_topics if self.roles is not None else {}
        marked = self.deleter.marked  # being deleted: not registered again
        topics = {topic for topic, _, _, _ in published_partitions(self.tables)
                  if topic not in replicated and topic not in marked}
        return {topic: self.config.partitions_for(topic) for topic in topics}

    # --- reporting --------------------------------------------------------------

    def _report_unreachable(self, exc=None) -> None:
        waited = time.monotonic() - self._started
        if not self.checked and waited * 1000 >= self.config.zk_connectiontimeout_ms:
            self.checked = None  # told the supervisor; the id is still checked on connecting
            log.error("ZooKeeper at %s did not answer within %d ms; serving without it and retrying",
                      self.config.zk_connect, self.config.zk_connectiontimeout_ms)
            self.channel.send(Op.CHECKED, zookeeper=False)
        if exc is not None:
            self._warn(f"ZooKeeper unreachable ({exc.__class__.__name__}: {exc}); retrying")

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("%s", message)

    def _report(self) -> None:
        epoch = self.controller.epoch if self.controller is not None else None
        if self.counter_row is not None:
            self.counter_row[counters.CONTROLLER] = 1 if epoch is not None else 0
            self.counter_row[counters.CONTROLLER_EPOCH] = epoch or 0
        registration = self.registration
        connected = bool(self.client is not None and self.client.connected)
        state = {
            "connected": connected,
            "state": self._zk_state if self.client is not None else "connecting",
            "registered": bool(connected and registration and registration.registered_session is not None
                               and registration.registered_session == self.client.client_id[0]),
            "topics": len(registration.topics) if registration else 0,
            "controller_epoch": self.controller.epoch if self.controller is not None else None,
            "zk_connect": self.config.zk_connect,
        }
        if state != self._reported:
            self._reported = state
            self.channel.send(Op.ZK_STATE, **state)

    # --- stop -------------------------------------------------------------------

    def _deregister(self) -> None:
        if self.registration is not None and self.client is not None and self.client.connected:
            try:
                if self.controller is not None:
                    self.controller.resign()  # another broker takes over without waiting for the session
                self.registration.deregister()
            except ZK_ERRORS as exc:
                log.warning("could not delete the registrations (%s); they go with the session", exc)

    def _close(self) -> None:
        if self.client is not None:
            try:
                close_client(self.client)
            except Exception as exc:  # closing must not keep the process alive
                log.warning("closing the ZooKeeper client: %s", exc)
        self.client = None

