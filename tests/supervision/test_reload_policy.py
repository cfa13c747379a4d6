"""Which settings a reload applies (mpbroker.supervision.reload_policy): the reloadable
ones change, the others are reported as needing a restart and keep their running value."""

from mpbroker.config.broker_config import config_from_properties
from mpbroker.supervision.reload_policy import RELOADABLE, plan_reload, reload_config


def config(**properties):
    loaded, _ = config_from_properties({key.replace("_", "."): str(value) for key, value in properties.items()})
    return loaded


def test_reloadable_keys_apply_and_the_others_need_a_restart():
    running = config(port=9092, log_retention_hours=168, log_level="INFO")
    loaded = config(port=9093, log_retention_hours=1, log_level="DEBUG")
    plan = plan_reload(running, loaded)
    assert plan.applied == {"log.retention.hours": "1", "log.level": "DEBUG"}
    assert plan.needs_restart == ["port"]


def test_nothing_changed_plans_nothing():
    plan = plan_reload(config(port=9092), config(port=9092))
    assert plan.applied == {} and plan.needs_restart == []


def test_reload_config_keeps_the_running_values_of_restart_only_keys(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(f"log.dir={tmp_path}/logs\nport=9999\nnum.workers=4\nlog.flush.interval=7\n")
    running = config(log_dir=f"{tmp_path}/logs", port=9092, num_workers=2)
    now, plan = reload_config(running, str(path), [])
    assert now.port == 9092 and now.num_workers == 2  # kept
    assert now.log_flush_interval == 7  # applied
    assert plan.needs_restart == ["num.workers", "port"]


def test_every_reloadable_key_is_a_key_the_configuration_knows():
    known = set(config().as_properties())
    assert RELOADABLE <= known
