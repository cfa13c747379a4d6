"""Which settings a running broker takes from a reload (HUP, ``mpbroker-ctl reload``):
the flush and retention policy, the message and request bounds, the connection limits,
the log level. Everything else (ports, directories, the number of workers, ZooKeeper)
shapes what the supervisor made before it forked, so it needs a restart: a reload that
changes it keeps the running value and says so."""

import logging
from typing import NamedTuple

from mpbroker.config.broker_config import load_config

log = logging.getLogger("mpbroker.supervisor")

RELOADABLE = frozenset({
    "log.flush.interval", "topic.log.flush.interval", "log.default.flush.scheduler.interval.ms",
    "log.default.flush.interval.ms", "topic.flush.intervals.ms", "log.retention.hours",
    "topic.log.retention.hours", "log.retention.size", "log.cleanup.interval.mins", "log.roll.hours",
    "log.file.size", "max.message.size", "max.inflated.request.bytes", "log.level",
    "worker.heartbeat.timeout.ms", "max.connections", "connections.max.idle.ms", "max.queued.responses",
    "max.connections.per.ip", "request.receive.timeout.ms", "log.flush.offset.checkpoint.interval.ms",
    "allow.unknown.keys",  # applies while the file is read
})


class ReloadPlan(NamedTuple):
    applied: dict  # key -> new value, for the keys that change now
    needs_restart: list  # changed keys a reload cannot apply, sorted


def plan_reload(running, loaded) -> ReloadPlan:
    """What a reload from ``running`` to ``loaded`` (two configurations) applies."""
    old, new = running.as_properties(), loaded.as_properties()
    changed = {key for key in new if new[key] != old.get(key)}
    return ReloadPlan({key: new[key] for key in changed & RELOADABLE}, sorted(changed - RELOADABLE))


def reload_config(running, config_path: str, overrides) -> tuple:
    """``(configuration now in force, ReloadPlan)`` after reading ``config_path`` again;
    ConfigError (nothing applied) when it cannot be read or is not valid."""
    loaded, warnings = load_config(config_path, overrides)
    for warning in warnings:
        log.warning("%s", warning)
    plan = plan_reload(running, loaded)
    if plan.needs_restart:
        log.warning("reload: %s can only change with a restart; keeping the running values",
                    ", ".join(plan.needs_restart))
    return running.with_overrides(plan.applied), plan
