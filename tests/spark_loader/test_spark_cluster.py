"""The Spark loader on a Spark standalone cluster, not ``local[N]``: a Master and two
Workers of one core each started from the installed PySpark's ``spark-class``
(``mpbroker.testing.spark_cluster``), shared by the module. The loads are the README's
block ``spark-cluster``: its ``mpbroker-spark-load --master spark://...`` line run as an
operator runs it (a subprocess; this module's cluster, ZooKeeper chroot and a scratch
$HOME put in for the README's), against a real broker with two 4-partition topics; its
Master and Worker lines are checked against the daemons the module starts. No mocks.

Checked: every message loaded exactly once; the application ran on the cluster (the
master lists it finished, an executor of it on each worker); a second load takes only
the new messages although worker 1 is SIGKILLed (with its executor and their Python
workers: a lost machine) while its executor runs a task of that load: the task runs
again on worker 2. When the module ends, nothing the cluster started is left running.
"""

import shlex
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from mpbroker.testing.spark_cluster import MASTER_CLASS, QUICK_JVM_OPTIONS, WORKER_CLASS, SparkStandaloneCluster
from tests.broker.harness import BrokerProcess
from tests.polling import wait_for
from tests.readme.readme_blocks import REPO, block, commands
from tests.spark_loader.loads import (
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
    saved_summaries,
    wait_registered,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APP_NAME = "mpbroker-spark-load"
TOPICS = ("page-views", "clicks")  # the README's
# Every JVM here (daemons, executors, the command's driver) lives for seconds: C1 only and
# the serial collector halve the CPU their start-up takes (QUICK_JVM_OPTIONS).
QUICK_JVM = {"JAVA_TOOL_OPTIONS": QUICK_JVM_OPTIONS}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores_per_worker=1,
                                memory="1g", env=QUICK_JVM) as cluster:
        yield cluster
    assert cluster.left_running() == [], "processes of the cluster outlived it"


class ReadmeBlock(NamedTuple):
    master: list  # the Master line's words
    workers: list  # each Worker line's words
    load: str  # the load line, as written


def readme_block() -> ReadmeBlock:
    lines = commands(block("spark-cluster"))
    daemons = [shlex.split(line.removesuffix("&")) for line in lines if "bin/spark-class " in line]
    (load,) = [line for line in lines if "mpbroker-spark-load " in line]
    (master,) = [words for words in daemons if words[1] == MASTER_CLASS]
    return ReadmeBlock(master, [words for words in daemons if words[1] == WORKER_CLASS], load)


def options(words: list) -> tuple:
    """(``--name value`` pairs as a dict, the other arguments) of a spark-class command's words."""
    pairs, rest, i = {}, [], 2
    while i < len(words):
        if words[i].startswith("--"):
            pairs[words[i]] = words[i + 1]
            i += 2
        else:
            rest.append(words[i])
            i += 1
    return pairs, rest


class FirstLoad(NamedTuple):
    brokers: str
    zk_connect: str
    home: Path
    output: Path
    sent: list
    summary: dict
    app_id: str


def start_readme_load(cluster, zk_connect: str, home: Path, log_path: Path, *extra) -> subprocess.Popen:
    """The README's load line (with ``extra`` arguments) on this module's cluster, its output
    to ``log_path``; in a process group of its own (its Spark JVM with it)."""
    readme = readme_block()
    master_url = f"spark://{options(readme.master)[0]['--host']}:{options(readme.master)[0]['--port']}"
    line = readme.load
    for written, here in ((master_url, cluster.master_url), ("localhost:2181/mpbroker", zk_connect),
                          ("$HOME", str(home))):
        assert written in line, f"the README's load line no longer names {written}: {line}"
        line = line.replace(written, here)
    env = cli_env(SPARK_LOCAL_IP=HOST, **QUICK_JVM)  # the driver on the address the executors reach
    env.pop("PYSPARK_PYTHON", None)  # as an operator's shell: the command must name its own Python
    with open(log_path, "w") as log:
        return subprocess.Popen(["bash", "-c", " ".join([line, *extra])], cwd=REPO, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def app_ids(cluster) -> set:
    """The ids of the loads' applications the master lists as finished."""
    return {app["id"] for app in cluster.state()["completedapps"]
            if app["name"] == APP_NAME and app["state"] == "FINISHED"}


def executor_logs(cluster, worker: int, app_id: str) -> list:
    """The stderr of each executor of ``app_id`` on worker ``worker``."""
    return [p.read_text(errors="replace") for p in Path(cluster.work_dir(worker), app_id).glob("*/stderr")]


def attempts_started(log: str, retried: bool = False) -> int:
    """How many task attempts an executor's stderr says it started (only re-runs: ``retried``)."""
    return sum(1 for line in log.splitlines() if "Executor: Running task " in line
               and (not retried or not line.split("Running task ")[1].split()[0].endswith(".0")))


@pytest.fixture(scope="module")
def first_load(cluster, zookeeper, tmp_path_factory):
    """A broker registered in ZooKeeper with the README's two topics (4 partitions each),
    and the README's load of them on the cluster."""
    home = tmp_path_factory.mktemp("home")
    zk_connect = zookeeper.connect_string("/spark-cluster")
    with BrokerProcess(home / "broker", num_partitions=4, brokerid=1, enable_zookeeper="true",
                       zk_connect=zk_connect) as broker:
        brokers = broker_list(broker)
        sent = produce(brokers, "page-views", 1500) + produce(brokers, "clicks", 500)
        assert {(s.topic, s.partition) for s in sent} == {(t, p) for t in TOPICS for p in range(4)}
        wait_registered(zk_connect, TOPICS, {1})
        before = app_ids(cluster)
        log_path = home / "first-load.log"
        process = start_readme_load(cluster, zk_connect, home, log_path)
        try:
            assert process.wait(CLI_TIMEOUT_S) == 0, log_path.read_text()[-4000:]
        finally:
            kill_group(process)
        output = home / "mpbroker-parquet"
        (summary,) = saved_summaries(output).values()
        (app_id,) = app_ids(cluster) - before
        yield FirstLoad(brokers, zk_connect, home, output, sent, summary, app_id)


def test_the_readme_starts_the_master_and_workers_this_module_runs(cluster):
    readme = readme_block()
    assert len(readme.workers) == len(cluster.workers) == 2
    for words, daemon in [(readme.master, cluster.master)] + list(zip(readme.workers, cluster.workers)):
        assert words[0].endswith("/pyspark/bin/spark-class") and words[1] == daemon.command[1]
        written, written_rest = options(words)
        run, run_rest = options(daemon.command)
        for name, value in written.items():  # the same values, but for the ports (free ones here)
            assert name in run and (name in ("--port", "--webui-port") or run[name] == value), (name, words)
        if daemon is not cluster.master:
            master = options(readme.master)[0]
            assert written_rest == [f"spark://{master['--host']}:{master['--port']}"]
            assert run_rest == [cluster.master_url]
    assert f"--master spark://{HOST}:" in readme.load


def test_the_first_load_holds_every_message_once_and_ran_on_both_workers(cluster, first_load):
    assert first_load.summary["messages"] == 2000
    rows = assert_exactly_once(first_load.output, first_load.sent)
    check_partition_offsets(rows)
    assert {load_id for _, load_id in rows} == {first_load.summary["load_id"]}
    for n in (1, 2):  # an executor on each worker (which of them runs a short task is the scheduler's choice)
        logs = executor_logs(cluster, n, first_load.app_id)
        assert any("Successfully registered with driver" in log for log in logs), f"worker {n}: {logs}"
    assert sum(attempts_started(log) for n in (1, 2) for log in executor_logs(cluster, n, first_load.app_id)) >= 8


def test_a_second_load_takes_only_the_new_messages_though_a_worker_is_killed_mid_way(cluster, first_load):
    """Small fetches make each task of the second load take a while; worker 1 is killed
    once its executor runs one. Last in the module: the cluster has one worker after it."""
    second = produce(first_load.brokers, "page-views", 40_000, first=1500, batch=200)
    log_path = first_load.home / "second-load.log"
    work = Path(cluster.work_dir(1))
    earlier = set(work.glob("*/*/stderr"))
    apps_before = app_ids(cluster)

    process = start_readme_load(cluster, first_load.zk_connect, first_load.home, log_path, "--fetch-size", "300")
    try:
        def worker_1_runs_a_task():
            return process.poll() is not None or any(
                attempts_started(p.read_text(errors="replace")) for p in set(work.glob("*/*/stderr")) - earlier)

        wait_for(worker_1_runs_a_task, CLI_TIMEOUT_S, "worker 1's executor to run a task of the load")
        assert process.poll() is None, log_path.read_text()[-4000:]
        cluster.kill_worker(1)
        process.wait(CLI_TIMEOUT_S)
    finally:
        kill_group(process)
    log_text = log_path.read_text()

    assert process.returncode == 0, log_text[-4000:]
    assert "Lost executor" in log_text, log_text[-4000:]
    (app_id,) = app_ids(cluster) - apps_before
    retried = sum(attempts_started(log, retried=True) for log in executor_logs(cluster, 2, app_id))
    assert retried >= 1, "no task ran again on worker 2: the kill came after worker 1's task was done"
    summaries = saved_summaries(first_load.output)
    (summary,) = [s for load_id, s in summaries.items() if load_id != first_load.summary["load_id"]]
    assert summary["messages"] == len(second)
    for part in summary["partitions"]:
        assert part["start"] == first_end_of(first_load.summary, part["topic"], part["partition"])
    rows = assert_exactly_once(first_load.output, first_load.sent + second)
    check_partition_offsets(rows)
    assert {sent for sent, load_id in rows if load_id == summary["load_id"]} == set(second)
    assert read_state(first_load.output)["moving"] is None
    assert not list(Path(first_load.output, "_mpbroker", "staging").rglob("*.parquet")), "a killed attempt's file"


def first_end_of(summary: dict, topic: str, partition: int) -> int:
    """Where ``summary``'s load left ``topic``'s ``partition``: where the next load starts."""
    return first_end({"partitions": [p for p in summary["partitions"] if p["topic"] == topic]}, partition)
