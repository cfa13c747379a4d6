"""The replicated topics' settings, mirrored from ZooKeeper into ``log.dir`` (the
broker side of Kafka's ``TopicConfigManager``).

A replicated topic's own settings (``retention.ms``, ``segment.bytes``,
``min.insync.replicas``, ...) live in ``/config/topics/<topic>``
(``registry.topic_config_nodes``). Every registrar mirrors those of every replicated
topic into ``<log.dir>/topic-configs/<topic>.json`` (``segments.topic_configs``,
replaced atomically and durably), where this broker's workers read them when they
make or open the topic's logs and its acceptor when it answers DescribeConfigs: so
any broker of the cluster describes any topic, and a broker that was down when a
topic was made, or its settings changed, has them once it is back.

``step`` runs inside the roles step (``replica_roles``), after the assignments were
read and before the roles go out: a topic seen for the first time has its settings
on disk before this broker takes any role in it, so its logs are created with them.
After that a kazoo watch on the node (``exists``: creation, change, removal) marks the
topic, and the next step reads it again; a new session (its watches are gone), and
every ``VERIFY_S``, reads them all. A file whose settings changed is announced with
``send(topic)`` (``Op.TOPIC_CONFIG``, through the supervisor to every worker), and
the workers apply it to the topic's open logs. A setting the broker cannot take (a
node written by hand) is left out with an error line; the others are kept.
"""

import logging
import threading
import time

from mpbroker.codec.errors import StorageError
from mpbroker.registry import topic_admin, topic_config_nodes
from mpbroker.registry.layout import LayoutError
from mpbroker.segments import topic_configs

log = logging.getLogger(__name__)

VERIFY_S = 30.0


class TopicSettings:
    def __init__(self, client, log_dir: str, send):
        self.client = client
        self.log_dir = log_dir
        self._send = send  # callable(topic): its file changed
        self._known = set()  # topics whose node is read and watched under this session
        self._changed = set()  # topics a watch fired for (kazoo's thread adds, the step takes)
        self._lock = threading.Lock()
        self._refused = {}  # topic -> the refusals last logged (logged once per change)
        self._next_verify = time.monotonic() + VERIFY_S

    def forget(self) -> None:
        """Read every topic again at the next step (a new session lost the watches)."""
        self._known = set()

    def step(self, topics) -> None:
        """Mirror the settings of ``topics`` (every replicated topic) that are new, changed
        or due. ZooKeeper errors propagate (the step is retried, and the roles with it);
        a file that cannot be written is logged and tried again at the next step."""
        now = time.monotonic()
        if now >= self._next_verify:
            self._next_verify = now + VERIFY_S
            self._known = set()
        with self._lock:
            changed, self._changed = self._changed, set()
        for topic in topics:
            if topic in self._known and topic not in changed:
                continue
            try:
                self._mirror(topic)
            except (OSError, StorageError) as exc:
                log.error("cannot keep the settings of topic %s in %s: %s; trying again", topic, self.log_dir,
                          getattr(exc, "strerror", None) or exc)
                continue
            self._known.add(topic)
        self._known &= set(topics)

    def _mirror(self, topic: str) -> None:
        try:
            configs = topic_admin.topic_config(self.client, topic, watch=self._on_event)
        except LayoutError as exc:
            log.error("%s; the topic keeps the settings it had here", exc)
            return
        kept, refused = topic_configs.usable(configs)
        if refused and self._refused.get(topic) != refused:
            log.error("topic %s: settings in ZooKeeper this broker cannot take, left out: %s", topic,
                      "; ".join(refused.values()))
        self._refused[topic] = refused
        found = topic_configs.read(self.log_dir, topic)
        have = found["configs"] if found else None
        if have == kept or (have is None and not kept):
            return
        topic_configs.write(self.log_dir, topic, None, kept)
        log.info("topic %s: settings %s", topic, ", ".join(f"{name}={value}" for name, value in sorted(kept.items()))
                 or "none of its own")
        self._send(topic)

    def _on_event(self, event) -> None:  # kazoo's thread: note it only
        topic = topic_config_nodes.topic_of(event.path or "")
        if topic is not None:
            with self._lock:
                self._changed.add(topic)
