"""Settings of the ZooKeeper consumer connector, with Kafka 0.7's key names.

Like ProducerSettings: a dict of properties and/or keyword arguments with ``_`` for
``.``; unknown keys are refused with the list of known ones. Defaults are 0.7's but
for ``backoff.increment.ms`` (100 ms rather than 1 s between fetches that found
nothing, for real-time consumers) and ``fetch.size`` (1 MiB, PROTOCOL.md). Four are
mpbroker's: ``autofinish.enable`` (false: a message counts as finished only when the
application passes it to ``ConsumerConnector.mark_finished``, and every commit stores
finished offsets only), ``audit.envelope`` (strip producers' audit envelopes), and
``rebalance.settle.ms`` and ``rebalance.finish.ms`` (``mpbroker.clients.groups.handover``:
how long a start waits for the registry to settle, and a rebalance for the messages in
flight; 0 turns either off).
"""

from dataclasses import dataclass

from mpbroker.clients.core.settings import _int, build_settings, parse_bool
from mpbroker.registry.layout import check_consumer_id, check_group

OFFSET_RESETS = ("smallest", "largest")
# 0.7 spells these without dots; the keyword group_id arrives as group.id
_ALIASES = {"groupid": "group_id", "consumerid": "consumer_id", "group.id": "group_id"}


@dataclass
class ConsumerSettings:
    group_id: str = ""  # groupid: the consumer group (required)
    zk_connect: str = ""  # zk.connect: host:port[,host:port][/chroot] (required)
    consumer_id: str = ""  # consumerid: default <group>_<host>-<ms>-<8 hex>
    zk_sessiontimeout_ms: int = 6000  # zk.sessiontimeout.ms
    zk_connectiontimeout_ms: int = 6000  # zk.connectiontimeout.ms
    socket_timeout_ms: int = 30000  # socket.timeout.ms
    fetch_size: int = 1024 * 1024  # fetch.size: bytes per partition per fetch
    max_fetch_size: int = 64 * 1024 * 1024  # the fetch size grows to this for one large message
    backoff_increment_ms: int = 100  # backoff.increment.ms: wait after a fetch that found nothing
    queuedchunks_max: int = 10  # queuedchunks.max: fetched chunks buffered per stream
    autocommit_enable: bool = True  # autocommit.enable
    autocommit_interval_ms: int = 10000  # autocommit.interval.ms
    autooffset_reset: str = "smallest"  # autooffset.reset: smallest | largest
    consumer_timeout_ms: int = -1  # consumer.timeout.ms: -1 blocks for ever
    rebalance_retries_max: int = 4  # rebalance.retries.max
    rebalance_backoff_ms: int = 2000  # rebalance.backoff.ms
    rebalance_settle_ms: int = 1500  # the first rebalance waits until the group's view was this long unchanged
    rebalance_finish_ms: int = 5000  # a rebalance waits this long at most for the messages handed out to finish
    autofinish_enable: bool = True  # autofinish.enable: false = finished only through mark_finished()
    audit_envelope: bool = False  # audit.envelope: hand out payloads without their audit envelope

    @classmethod
    def from_properties(cls, properties=None, **overrides) -> "ConsumerSettings":
        return build_settings(cls, "consumer", _ALIASES, properties, overrides)

    def _check(self) -> None:
        if not self.group_id:
            raise ValueError("groupid is required")
        if not self.zk_connect:
            raise ValueError("zk.connect is required")
        check_group(self.group_id)
        if self.consumer_id:
            check_consumer_id(self.consumer_id)
        for name in ("zk_sessiontimeout_ms", "zk_connectiontimeout_ms", "socket_timeout_ms", "fetch_size",
                     "max_fetch_size", "queuedchunks_max", "autocommit_interval_ms"):
            setattr(self, name, _int(name.replace("_", "."), getattr(self, name), 1))
        for name in ("backoff_increment_ms", "rebalance_retries_max", "rebalance_backoff_ms", "rebalance_settle_ms",
                     "rebalance_finish_ms"):
            setattr(self, name, _int(name.replace("_", "."), getattr(self, name), 0))
        self.consumer_timeout_ms = _int("consumer.timeout.ms", self.consumer_timeout_ms, -1)
        if self.max_fetch_size < self.fetch_size:
            raise ValueError("max.fetch.size is below fetch.size")
        if isinstance(self.autocommit_enable, str):
            text = self.autocommit_enable.strip().lower()
            if text not in ("true", "false"):
                raise ValueError(f"autocommit.enable: {self.autocommit_enable!r} is neither true nor false")
            self.autocommit_enable = text == "true"
        self.autofinish_enable = parse_bool("autofinish.enable", self.autofinish_enable)
        self.audit_envelope = parse_bool("audit.envelope", self.audit_envelope)
        if self.autooffset_reset not in OFFSET_RESETS:
            raise ValueError(f"autooffset.reset: {self.autooffset_reset!r} is not smallest or largest")
