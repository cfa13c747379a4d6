"""The broker's own nodes in ZooKeeper: ``/brokers/ids/<id>``, one
``/brokers/topics/<topic>/<id>`` per topic, and ``/brokers/endpoints/<id>`` (where it
serves the modern protocol, ``registry.endpoints``), all ephemeral, all bound to one
session.

``claim_id`` decides whether the id is free: a node holding this broker's own value
(a registration of this very broker from a session that is going away) is replaced;
a node with another value may be a broker that died less than a session timeout ago,
so the claim waits for it to expire, and raises BrokerIdConflict if it stays (a live
broker has the id). ``register`` writes every node under the current session;
``registered_session`` tells the caller when a new session (after an expiry) needs
everything written again. ``broker_epoch`` is the czxid of the id's node as this
session wrote it (Kafka's broker epoch, KIP-380): each registration has a new one, so
the controller tells a broker that restarted (or got a new session) from the one it
saw before, and ``replica_roles`` leads only under a state that names it (the
controller writes the leader's into the state). Every ZooKeeper call is bounded by
``op_timeout_s``, so a server that goes away mid-call costs the caller a
ConnectionLoss, not a hang.
"""

import logging
import time

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from mpbroker.registry import layout

log = logging.getLogger(__name__)



class BrokerIdConflict(Exception):
    """Another live broker is registered with this broker id."""


class BrokerRegistration:
    def __init__(self, client, info: layout.BrokerInfo, op_timeout_s: float = 5.0):
        self.client = client
        self.info = info
        self.op_timeout_s = op_timeout_s
        self.topics = {}  # topic -> partition count, every topic this broker has
        self.endpoint = None  # (path, value) of the modern protocol's endpoint node, written with the id
        self.registered_session = None  # the session id everything was last written under
        self._epoch = None  # the czxid of the id's node written under registered_session
        self._written_topics = set()

    @property
    def path(self) -> str:
        return layout.broker_path(self.info.id)

    def _session(self):
        return self.client.client_id[0] if self.client.client_id else None

    @property
    def broker_epoch(self):
        """The czxid of this broker's registration under the current session, or None
        while it is not registered under it."""
        if self.registered_session is None or self.registered_session != self._session():
            return None
        return self._epoch

    def _wait(self, async_result):
        return async_result.get(timeout=self.op_timeout_s)

    def holder(self):
        """``(value, ephemeral owner session)`` of the id's node, or None."""
        try:
            data, stat = self._wait(self.client.get_async(self.path))
        except NoNodeError:
            return None
        return data, stat.ephemeralOwner

    def check_id(self, expire_wait_s: float) -> None:
        """Raise BrokerIdConflict unless the id is free, ours, or frees up within
        ``expire_wait_s`` (a dead broker's session running out)."""
        deadline = time.monotonic() + expire_wait_s
        warned = False
        while True:
            held = self.holder()
            if held is None or held[0] == self.info.value() or held[1] == self._session():
                return
            if time.monotonic() >= deadline:
                raise BrokerIdConflict(
                    f"broker id {self.info.id} is registered in ZooKeeper by another broker "
                    f"({held[0].decode(errors='replace')}); give this broker another brokerid")
            if not warned:
                log.warning("broker id %d is registered by %s; waiting up to %.0fs for that registration to "
                            "expire (a broker that just died)", self.info.id, held[0].decode(errors="replace"),
                            expire_wait_s)
                warned = True
            time.sleep(0.2)

    def _create_ephemeral(self, path: str, value: bytes, replace_any: bool) -> int:
        """Create ``path`` under this session; replace a node of another session if it
        holds ``value`` (or any value, with ``replace_any``). Returns the node's czxid."""
        session = self._session()
        for _ in range(3):
            try:
                self._wait(self.client.create_async(path, value, ephemeral=True, makepath=True))
            except NodeExistsError:
                pass
            try:
                data, stat = self._wait(self.client.get_async(path))
            except NoNodeError:
                continue
            if stat.ephemeralOwner == session and data == value:
                return stat.czxid  # created now, or ours already (a create retried after a lost connection)
            if data != value and not replace_any:
                raise BrokerIdConflict(f"{path} is held by {data.decode(errors='replace')}")
            try:
                self._wait(self.client.delete_async(path, version=stat.version))
            except NoNodeError:
                pass
        raise ConnectionLoss(f"could not create {path}: it keeps coming back")

    def add_topics(self, topics: dict) -> list:
        """Note topics (topic -> partition count); returns those that are new. A topic's
        count is fixed once noted (``topic.partition.count.map`` needs a restart)."""
        new = [topic for topic in topics if topic not in self.topics]
        self.topics.update({topic: topics[topic] for topic in new})
        return new

    def remove_topic(self, topic: str) -> None:
        """The broker no longer has ``topic`` (it was deleted): its node goes."""
        self.topics.pop(topic, None)
        if topic in self._written_topics:
            self._written_topics.discard(topic)
            self._delete(layout.topic_broker_path(topic, self.info.id))
            log.info("deregistered deleted topic %s from ZooKeeper", topic)

    def register(self) -> None:
        """Write the id and every topic under the current session (a new session
        writes everything again)."""
        session = self._session()
        if session != self.registered_session:
            self._written_topics.clear()
            self._epoch = self._create_ephemeral(self.path, self.info.value(), replace_any=False)
            if self.endpoint is not None:
                self._create_ephemeral(*self.endpoint, replace_any=True)
            self.registered_session = session
            log.info("registered broker %d as %s in ZooKeeper (session 0x%x, broker epoch %d)", self.info.id,
                     self.info.value().decode(), session, self._epoch)
        for topic, count in sorted(self.topics.items()):
            if topic in self._written_topics:
                continue
            self._create_ephemeral(layout.topic_broker_path(topic, self.info.id), str(count).encode(),
                                   replace_any=True)
            self._written_topics.add(topic)
            log.info("registered topic %s (%d partitions) in ZooKeeper", topic, count)

    def verify(self) -> bool:
        """True if every node this session wrote is still there (someone may delete
        them by hand); otherwise the next ``register`` writes them again."""
        paths = [self.path] + [layout.topic_broker_path(topic, self.info.id) for topic in self._written_topics]
        if self.endpoint is not None:
            paths.append(self.endpoint[0])
        results = [self.client.exists_async(path) for path in paths]
        missing = [path for path, result in zip(paths, results) if self._wait(result) is None]
        if missing:
            log.warning("registrations gone from ZooKeeper: %s; writing them again", ", ".join(missing))
            self.registered_session = None
        return not missing

    def deregister(self) -> None:
        """Delete this broker's nodes (closing the session would too; this is explicit)."""
        if self.registered_session is None or self._session() != self.registered_session:
            return
        for topic in sorted(self._written_topics):
            self._delete(layout.topic_broker_path(topic, self.info.id))
        if self.endpoint is not None:
            self._delete(self.endpoint[0])
        self._delete(self.path)
        self.registered_session = None
        self._written_topics.clear()
        log.info("deregistered broker %d from ZooKeeper", self.info.id)

    def _delete(self, path: str) -> None:
        try:
            self._wait(self.client.delete_async(path))
        except NoNodeError:
            pass
