"""The broker's status as ``mpbroker-ctl status`` shows it (one JSON object over the
control socket): the supervisor's phase and readiness, each child's slot (pid, state,
restarts, uptime, heartbeat age, last exit, respawn back-off), ZooKeeper as the
registrar last reported it, and every partition as its worker published it in the
shared partition tables, with a message rate.

Rates come from samples of each partition's ``messages_in`` every RATE_SAMPLE_S, kept
for RATE_WINDOW_S: the rate is the growth since the oldest sample kept.
"""

import collections
import time

from mpbroker.clock import monotonic_ms
from mpbroker.ipc import counters
from mpbroker.ipc.partition_table import Role, published_partitions
from mpbroker.ipc.slot_table import SlotState
from mpbroker.kafka_protocol.api import ApiKey

RATE_SAMPLE_S = 5.0
RATE_WINDOW_S = 60.0


class RateSampler:
    """Messages per second per partition over the last RATE_WINDOW_S."""

    def __init__(self):
        self._samples = collections.deque()  # (time.monotonic(), {(topic, partition): messages_in})
        self._next_sample = 0.0

    def sample(self, now: float, tables) -> None:
        """Take a sample when one is due (``now`` is time.monotonic())."""
        if now < self._next_sample:
            return
        self._next_sample = now + RATE_SAMPLE_S
        totals = {(topic, partition): state.messages_in for topic, partition, _, state in published_partitions(tables)}
        self._samples.append((now, totals))
        while self._samples and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()

    def rate(self, key, current: int) -> float:
        if not self._samples:
            return 0.0
        when, totals = self._samples[0]
        span = time.monotonic() - when
        return (current - totals.get(key, 0)) / span if span > 0 else 0.0


def respawn_in_s(child):
    """Seconds until a dead child is forked again, or None when no respawn is scheduled
    (alive, or stopping). A worker whose death the acceptor has not confirmed yet counts
    its back-off from now."""
    if child.respawn_at is not None:
        return round(max(0.0, child.respawn_at - time.monotonic()), 1)
    if child.awaiting_ack is not None:
        return round(child.backoff, 1)
    return None


def child_status(child, slots, now_ms: int) -> dict:
    slot = slots.read(child.slot)
    heartbeat = slot.heartbeat_ms
    return {
        "slot": child.slot, "pid": child.pid or None, "state": SlotState(slot.state).name.lower(),
        "restarts": child.restarts,
        "uptime_s": round(time.monotonic() - child.started, 1) if child.alive else 0,
        "heartbeat_age_ms": now_ms - heartbeat if heartbeat else None,
        "last_exit": child.last_exit,
        "respawn_in_s": respawn_in_s(child),
    }


def partition_status(tables, rates: RateSampler) -> tuple:
    """``(rows, partitions per worker slot)``: every published partition, sorted."""
    rows = published_partitions(tables)
    by_worker = collections.Counter(slot for _, _, slot, _ in rows)
    partitions = [{
        "topic": topic, "partition": partition, "worker": slot,
        "log_start": state.log_start, "log_end": state.log_end, "flushed_end": state.flushed_end,
        "segments": state.segment_count, "bytes": state.log_end - state.log_start,
        "messages_in": state.messages_in,
        "messages_per_s": round(rates.rate((topic, partition), state.messages_in), 1),
        "role": Role.NAMES.get(state.role, str(state.role)),
        "leader_epoch": state.leader_epoch if state.role != Role.UNREPLICATED else None,
        "high_watermark": state.high_watermark if state.role != Role.UNREPLICATED else None,
        "isr": list(state.isr) if state.role != Role.UNREPLICATED else None,
    } for topic, partition, slot, state in sorted(rows, key=lambda row: (row[0], row[1]))]
    return partitions, by_worker


def broker_status(supervisor) -> dict:
    """The status of ``supervisor`` (a ``mpbroker.supervisor.Supervisor``)."""
    now_ms = monotonic_ms()
    config = supervisor.config
    partitions, by_worker = partition_status(supervisor.memory.tables, supervisor.rates)
    workers = [{**child_status(child, supervisor.slots, now_ms), "partitions": by_worker.get(child.slot, 0)}
               for child in supervisor.workers]
    registrar, metrics = supervisor.registrar, supervisor.metrics
    return {
        "ok": True, "pid": supervisor.pid, "brokerid": config.brokerid, "port": supervisor.port,
        "kafka_port": supervisor.kafka_port, "kafka": kafka_listener_status(supervisor),
        "phase": supervisor.phase, "ready": supervisor.ready,
        "uptime_s": round(time.monotonic() - supervisor.started_at, 1),
        "log_dir": config.log_dir, "scheduling": supervisor.scheduling, "workers": workers,
        "acceptor": child_status(supervisor.acceptor, supervisor.slots, now_ms),
        "registrar": child_status(registrar, supervisor.slots, now_ms) if registrar else None,
        "zookeeper": supervisor.zk_state if registrar else None,
        "zk_connect": config.zk_connect,  # for mpbroker-ctl groups, with or without the registrar
        "metrics": {**child_status(metrics, supervisor.slots, now_ms), "host": config.metrics_host,
                    "port": supervisor.listeners.metrics.getsockname()[1]} if metrics else None,
        "partitions": partitions,
    }


def kafka_listener_status(supervisor):
    """The modern listener: its port, its connections open now and its requests per API
    (from the acceptor's counter row), or None with ``kafka.port=-1``."""
    if supervisor.kafka_port is None:
        return None
    row = supervisor.memory.counters.read(supervisor.acceptor.slot)
    requests = {ApiKey(key).name.lower(): row[counters.KAFKA_REQUESTS + index]
                for index, key in enumerate(counters.MODERN_API_KEYS)}
    return {"port": supervisor.kafka_port, "connections_open": row[counters.KAFKA_CONNECTIONS_OPEN],
            "connections_accepted": row[counters.KAFKA_CONNECTIONS_ACCEPTED], "requests": requests}
