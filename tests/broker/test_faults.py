"""Killed processes under acknowledged load: a worker, the acceptor, the whole tree.
Guarantee checked: every message acknowledged with durability "flush" (and, for
process deaths, "append") is there afterwards; the broker comes back by itself
(supervisor) or on restart, without manual repair."""

import os
import signal

import pytest

from mpbroker.codec.message_set import validate_message_set
from mpbroker.records.scan import valid_batches_prefix
from mpbroker.segments.naming import parse_partition_dir
from mpbroker.segments.record_format import holds_record_batches

from .load import AckedLoad, read_everything


def all_flushed(status) -> bool:
    return all(p["flushed_end"] == p["log_end"] for p in status["partitions"])


def assert_logs_valid(log_dir: str) -> None:
    """Every file of every partition directory holds whole, valid messages (record
    batches in a partition marked ``record-batches``: modern topics, ``__consumer_offsets``)."""
    for name in os.listdir(log_dir):
        directory = os.path.join(log_dir, name)
        if not os.path.isdir(directory) or parse_partition_dir(name) is None:
            continue  # (topic-configs/, checkpoints/)
        record_batches = holds_record_batches(directory)
        for segment in sorted(os.listdir(directory)):
            with open(os.path.join(directory, segment), "rb") as f:
                data = f.read()
            valid = valid_batches_prefix(data) == len(data) if record_batches else validate_message_set(data).complete
            assert valid, f"{name}/{segment} holds invalid bytes"


@pytest.mark.slow
def test_worker_killed_under_acked_load_loses_nothing(broker):
    load = AckedLoad(lambda: broker.port, "orders", 4, threads=4, requests=60).start()
    load.wait_for_acks(60)
    victim = broker.worker_pid(0)
    os.kill(victim, signal.SIGKILL)
    status = broker.wait_until(lambda s: s["workers"][0]["restarts"] == 1 and s["workers"][0]["state"] == "up",
                               timeout=20, what="worker 0 respawned")  # recovery times: tests/faults/
    assert status["workers"][0]["pid"] != victim
    load.join()
    stored = read_everything(broker.port, "orders", 4)
    missing = load.acked - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    assert len(load.acked) == 4 * 60 * 10
    assert "worker 0 (pid gone) died: signal SIGKILL" in broker.output()
    assert broker.status()["workers"][0]["partitions"] >= 1


@pytest.mark.slow
def test_acceptor_killed_is_respawned_and_clients_reconnect(broker):
    load = AckedLoad(lambda: broker.port, "clicks", 4, threads=3, requests=40, durability=0).start()
    load.wait_for_acks(30)
    os.kill(broker.status()["acceptor"]["pid"], signal.SIGKILL)
    broker.wait_until(lambda s: s["acceptor"]["restarts"] == 1 and s["acceptor"]["state"] == "up",
                      timeout=10, what="acceptor respawned")
    load.join()
    assert load.retries > 0  # the connections did break
    broker.wait_until(all_flushed, what="every appended byte flushed")
    stored = set(read_everything(broker.port, "clicks", 4))
    assert load.acked <= stored


@pytest.mark.slow
@pytest.mark.parametrize("durability", [0, 1])
def test_everything_acknowledged_survives_sigkill_of_the_tree(broker, durability):
    load = AckedLoad(lambda: broker.port, "pv", 4, threads=4, requests=400, durability=durability).start()
    load.wait_for_acks(200)
    broker.kill_tree()  # the load threads keep retrying until the broker is back
    acked_before_kill = set(load.acked)
    broker.start()
    assert "recovered" in broker.output()
    load.join(timeout=180)
    broker.wait_until(all_flushed, what="every appended byte flushed")  # append acks precede the flush
    stored = set(read_everything(broker.port, "pv", 4))
    assert acked_before_kill <= stored
    assert load.acked <= stored
    broker.stop()
    assert_logs_valid(broker.log_dir)
