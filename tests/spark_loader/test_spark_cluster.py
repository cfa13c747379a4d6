"""The Spark loader on a Spark standalone cluster, not ``local[N]``: a Master and two
Workers (one core each) started from the installed PySpark's ``spark-class``
(``mpbroker.testing.spark_cluster``), shared by the module; ``mpbroker-spark-load --master
spark://...`` run as a subprocess, as an operator runs it (the README's block
``spark-cluster``), against a real broker with a 4-partition topic. No mocks.

Checked: every message loaded exactly once, a second load takes only the new ones, and
the application ran on the cluster (the master lists it finished; an executor of it ran
tasks on each worker). A worker killed (SIGKILL, its executor and Python workers with
it) while its executor runs a task of the load: its tasks run again on the other worker,
and the load still holds every message once. When the module ends, nothing the cluster
started is left running.
"""

import json
import re
from pathlib import Path

import pytest

from mpbroker.testing.spark_cluster import SparkStandaloneCluster
from tests.polling import wait_for
from tests.spark_loader.test_spark_loader import (
    CLI_TIMEOUT_S,
    HOST,
    assert_exactly_once,
    broker_list,
    check_partition_offsets,
    cli_env,
    kill_group,
    produce,
    read_state,
    run_cli,
    saved_summaries,
    start_cli,
)

pytestmark = pytest.mark.timeout(300)

APP_NAME = "mpbroker-spark-load"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores_per_worker=1,
                                memory="1g") as cluster:
        yield cluster
    assert cluster.left_running() == [], "processes of the cluster outlived it"


def driver_env() -> dict:
    """The command's environment: the driver on the loopback address the executors reach."""
    return cli_env(SPARK_LOCAL_IP=HOST)


def load_on(cluster, brokers: str, topic: str, output, *extra) -> dict:
    result = run_cli("--broker-list", brokers, "--topic", topic, "--output", output, "--master", cluster.master_url,
                     *extra, env=driver_env())
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def app_ids(cluster) -> set:
    """The ids of the loads' applications the master lists as finished."""
    state = cluster.state()
    return {app["id"] for app in state["completedapps"] if app["name"] == APP_NAME and app["state"] == "FINISHED"}


def tasks_run_by_worker(cluster, app_id: str) -> dict:
    """worker number -> how many tasks its executors of ``app_id`` started (their stderr)."""
    counts = {}
    for n in range(1, len(cluster.workers) + 1):
        logs = Path(cluster.work_dir(n), app_id).glob("*/stderr")
        counts[n] = sum(len(re.findall(r"Executor: Running task ", log.read_text(errors="replace"))) for log in logs)
    return counts


def test_loads_run_on_both_workers_exactly_once_and_a_second_load_takes_only_the_new(cluster, broker_factory,
                                                                                       tmp_path):
    broker = broker_factory("b1", num_partitions=4, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    first = produce(brokers, "clustered", 2000)
    assert {s.partition for s in first} == {0, 1, 2, 3}
    before = app_ids(cluster)

    summary1 = load_on(cluster, brokers, "clustered", output)

    assert summary1["messages"] == 2000
    check_partition_offsets(assert_exactly_once(output, first))
    (app,) = app_ids(cluster) - before
    for n in (1, 2):  # an executor on each worker (which of them runs a short task is the scheduler's choice)
        logs = [p.read_text(errors="replace") for p in Path(cluster.work_dir(n), app).glob("*/stderr")]
        assert any("Successfully registered with driver" in log for log in logs), f"worker {n}: {logs}"
    assert sum(tasks_run_by_worker(cluster, app).values()) >= 4

    second = produce(brokers, "clustered", 700, first=2000)
    summary2 = load_on(cluster, brokers, "clustered", output)

    assert summary2["messages"] == 700 and summary2["load_id"] != summary1["load_id"]
    rows = assert_exactly_once(output, first + second)
    assert {sent for sent, load_id in rows if load_id == summary2["load_id"]} == set(second)
    assert set(saved_summaries(output)) == {summary1["load_id"], summary2["load_id"]}
    assert read_state(output)["moving"] is None
    assert len(app_ids(cluster) - before) == 2


def test_a_worker_killed_mid_load_loses_and_repeats_nothing(cluster, broker_factory, tmp_path):
    """Small fetches make each task take seconds; worker 1 is killed once its executor runs
    a task of the load. Last in the module: the cluster has one worker after it."""
    broker = broker_factory("b1", num_partitions=4, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    sent = produce(brokers, "survives", 40_000, batch=200)
    log_path = tmp_path / "load.log"
    work = Path(cluster.work_dir(1))
    started = {p for p in work.glob("*/*/stderr")}

    process = start_cli("--broker-list", brokers, "--topic", "survives", "--output", output,
                        "--master", cluster.master_url, "--fetch-size", "300", log_path=log_path, env=driver_env())
    try:
        def running_a_task():
            if process.poll() is not None:
                return True
            return any("Executor: Running task " in p.read_text(errors="replace")
                       for p in set(work.glob("*/*/stderr")) - started)

        wait_for(running_a_task, CLI_TIMEOUT_S, "worker 1's executor to run a task of the load")
        assert process.poll() is None, log_path.read_text()[-4000:]
        cluster.kill_worker(1)
        process.wait(CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            kill_group(process)
    log_text = log_path.read_text()

    assert process.returncode == 0, log_text[-4000:]
    assert re.search(r"Lost (executor|task)", log_text), "the kill came after worker 1's tasks were done"
    (summary,) = saved_summaries(output).values()
    assert summary["messages"] == len(sent)
    check_partition_offsets(assert_exactly_once(output, sent))
    assert read_state(output)["moving"] is None
    assert not any(Path(output, "_mpbroker", "staging").rglob("*.parquet")), "a killed attempt's file was left"
