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
from typing import NamedTuple

import pytest

from mpbroker.testing.spark_cluster import QUICK_JVM_OPTIONS, SparkStandaloneCluster
from tests.broker.harness import BrokerProcess
from tests.polling import wait_for
from tests.spark_loader.test_spark_loader import (
    CLI_TIMEOUT_S,
    HOST,
    assert_exactly_once,
    broker_list,
    check_partition_offsets,
    cli_env,
    first_end,
    kill_group,
    produce,
    read_state,
    run_cli,
    saved_summaries,
    start_cli,
)

pytestmark = pytest.mark.timeout(300)

APP_NAME = "mpbroker-spark-load"
# Every JVM here (daemons, executors, the command's driver) lives for seconds: C1 only and
# the serial collector halve the CPU their start-up takes (QUICK_JVM_OPTIONS).
QUICK_JVM = {"JAVA_TOOL_OPTIONS": QUICK_JVM_OPTIONS}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores_per_worker=1,
                                memory="1g", env=QUICK_JVM) as cluster:
        yield cluster
    assert cluster.left_running() == [], "processes of the cluster outlived it"


def driver_env() -> dict:
    """The command's environment: the driver on the loopback address the executors reach."""
    return cli_env(SPARK_LOCAL_IP=HOST, **QUICK_JVM)


def load_on(cluster, brokers: str, topic: str, output, *extra) -> dict:
    result = run_cli("--broker-list", brokers, "--topic", topic, "--output", output, "--master", cluster.master_url,
                     *extra, env=driver_env())
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout)


def app_ids(cluster) -> set:
    """The ids of the loads' applications the master lists as finished."""
    state = cluster.state()
    return {app["id"] for app in state["completedapps"] if app["name"] == APP_NAME and app["state"] == "FINISHED"}


def tasks_run_by_worker(cluster, app_id: str, attempt: str = r"\d+\.\d+") -> dict:
    """worker number -> how many task attempts (matching ``attempt``: "<task>.<attempt>")
    its executors of ``app_id`` started (their stderr)."""
    started = re.compile(rf"Executor: Running task {attempt} ")
    counts = {}
    for n in range(1, len(cluster.workers) + 1):
        logs = Path(cluster.work_dir(n), app_id).glob("*/stderr")
        counts[n] = sum(len(started.findall(log.read_text(errors="replace"))) for log in logs)
    return counts


class FirstLoad(NamedTuple):
    brokers: str
    output: Path
    sent: list
    summary: dict
    app_id: str


@pytest.fixture(scope="module")
def first_load(cluster, tmp_path_factory):
    """A broker with a 4-partition topic, and the first load of it on the cluster."""
    directory = tmp_path_factory.mktemp("loads")
    with BrokerProcess(directory / "b1", num_partitions=4, brokerid=1) as broker:
        brokers = broker_list(broker)
        sent = produce(brokers, "clustered", 2000)
        assert {s.partition for s in sent} == {0, 1, 2, 3}
        before = app_ids(cluster)
        summary = load_on(cluster, brokers, "clustered", directory / "out")
        (app_id,) = app_ids(cluster) - before
        yield FirstLoad(brokers, directory / "out", sent, summary, app_id)


def test_the_first_load_holds_every_message_once_and_ran_on_both_workers(cluster, first_load):
    assert first_load.summary["messages"] == 2000
    rows = assert_exactly_once(first_load.output, first_load.sent)
    check_partition_offsets(rows)
    assert {load_id for _, load_id in rows} == {first_load.summary["load_id"]}
    for n in (1, 2):  # an executor on each worker (which of them runs a short task is the scheduler's choice)
        logs = [p.read_text(errors="replace") for p in Path(cluster.work_dir(n), first_load.app_id).glob("*/stderr")]
        assert any("Successfully registered with driver" in log for log in logs), f"worker {n}: {logs}"
    assert sum(tasks_run_by_worker(cluster, first_load.app_id).values()) >= 4


def test_a_second_load_takes_only_the_new_messages_though_a_worker_is_killed_mid_way(cluster, first_load, tmp_path):
    """Small fetches make each task of the second load take seconds; worker 1 is killed
    (SIGKILL: the worker, its executor, their Python workers) once its executor runs one.
    Its tasks run again on worker 2. Last in the module: the cluster has one worker after it."""
    second = produce(first_load.brokers, "clustered", 40_000, first=2000, batch=200)
    log_path = tmp_path / "load.log"
    work = Path(cluster.work_dir(1))
    earlier = set(work.glob("*/*/stderr"))
    apps_before = app_ids(cluster)

    process = start_cli("--broker-list", first_load.brokers, "--topic", "clustered", "--output", first_load.output,
                        "--master", cluster.master_url, "--fetch-size", "300", log_path=log_path, env=driver_env())
    try:
        def worker_1_runs_a_task():
            return process.poll() is not None or any(
                "Executor: Running task " in p.read_text(errors="replace") for p in set(work.glob("*/*/stderr")) - earlier)

        wait_for(worker_1_runs_a_task, CLI_TIMEOUT_S, "worker 1's executor to run a task of the load")
        assert process.poll() is None, log_path.read_text()[-4000:]
        cluster.kill_worker(1)
        process.wait(CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            kill_group(process)
    log_text = log_path.read_text()

    assert process.returncode == 0, log_text[-4000:]
    assert "Lost executor" in log_text, log_text[-4000:]
    (app_id,) = app_ids(cluster) - apps_before
    rerun = tasks_run_by_worker(cluster, app_id, attempt=r"\d+\.[1-9]")
    assert rerun[2] >= 1, "no task ran again on worker 2: the kill came after worker 1's task was done"
    summaries = saved_summaries(first_load.output)
    (summary,) = [s for load_id, s in summaries.items() if load_id != first_load.summary["load_id"]]
    assert summary["messages"] == len(second)
    for part in summary["partitions"]:
        assert part["start"] == first_end(first_load.summary, part["partition"])
    rows = assert_exactly_once(first_load.output, first_load.sent + second)
    check_partition_offsets(rows)
    assert {sent for sent, load_id in rows if load_id == summary["load_id"]} == set(second)
    assert read_state(first_load.output)["moving"] is None
    assert not list(Path(first_load.output, "_mpbroker", "staging").rglob("*.parquet")), "a killed attempt's file"

