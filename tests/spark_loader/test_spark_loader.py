"""The Spark loader (``spark_loader``) end to end: real Spark (``local[2]``), real brokers
(``mpbroker serve`` process trees), a real ZooKeeper; no mocks.

In-process loads share one SparkSession (``spark`` fixture, module scope); the command
``mpbroker-spark-load`` runs as a subprocess only where a process is needed: exit codes,
stderr, crashes (``MPBROKER_LOADER_CRASH_AT``), SIGKILL, the lock.

What is checked each time: the Parquet output (read back with pyarrow, which skips
``DIR/_mpbroker``) holds every message produced exactly once, with the broker, partition
and log offset the producer's acknowledgements reported; ``state.json`` holds the log
ends; the summary counts what was read.
"""

import json
import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from mpbroker.clients.core.unknown_topics import UnknownTopicError
from mpbroker.clients.core.zk_registry import read_topic_partitions
from mpbroker.registry.zk_client import close_client
from mpbroker.spark_loader.job import CRASH_ENV
from mpbroker.spark_loader.state import LoaderState, LoadLockedError
from tests.polling import wait_for
from tests.spark_loader.loads import (
    CLI_DURATIONS,
    CLI_TIMEOUT_S,
    REPO,
    assert_exactly_once,
    broker_list,
    check_partition_offsets,
    cli_env,
    earliest_offsets,
    first_end,
    kill_group,
    load,
    load_dirs,
    log_ends,
    phase_reached,
    produce,
    read_output,
    read_state,
    run_cli,
    saved_summaries,
    spark,
    staged,
    staging_dirs,
    start_cli,
    try_start_client,
    wait_registered,
)

__all__ = ["spark"]  # the module-scoped SparkSession fixture


# --- 1-3: first, incremental and empty loads ---------------------------------------------------


def test_first_load_copies_every_message_once_with_its_broker_partition_and_offset(spark, broker_factory,
                                                                                    tmp_path):
    b1 = broker_factory("b1", num_partitions=4, brokerid=1)
    b2 = broker_factory("b2", num_partitions=4, brokerid=2)
    brokers = broker_list(b1, b2)
    sent = produce(brokers, "first", 2000)
    assert len({(s.broker, s.partition) for s in sent}) >= 6, "the keys should spread over most partitions"
    output = tmp_path / "out"

    summary = load(spark, output, brokers, ["first"])

    rows = assert_exactly_once(output, sent)
    check_partition_offsets(rows)
    assert {load_id for _, load_id in rows} == {summary["load_id"]}
    assert load_dirs(output) == {("first", summary["load_id"])}
    assert summary["messages"] == 2000
    assert summary["bytes"] == sum(len(s.payload) for s in sent)
    assert summary["gaps"] == []
    ends = {(broker_id, p): end for broker_id, broker in ((1, b1), (2, b2))
            for p, end in enumerate(log_ends(broker.port, "first", 4))}
    partitions = {(p["broker"], p["partition"]): p for p in summary["partitions"]}
    assert set(partitions) == set(ends)
    for (broker_id, p), end in ends.items():
        mine = [s for s in sent if (s.broker, s.partition) == (broker_id, p)]
        assert partitions[broker_id, p] == {
            "topic": "first", "broker": broker_id, "partition": p, "start": 0, "end": end, "log_end": end,
            "messages": len(mine), "bytes": sum(len(s.payload) for s in mine)}
    state = read_state(output)
    assert state["offsets"] == {f"first/{b}-{p}": end for (b, p), end in ends.items()}
    assert state["moving"] is None
    assert saved_summaries(output) == {summary["load_id"]: summary}
    assert staged(output) == []


def test_incremental_load_reads_only_the_new_messages_into_a_second_load_directory(spark, broker_factory,
                                                                                    tmp_path):
    broker = broker_factory("b1", num_partitions=3, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    first = produce(brokers, "incr", 600)
    summary1 = load(spark, output, brokers, ["incr"])
    state1 = read_state(output)
    second = produce(brokers, "incr", 900, first=600)

    summary2 = load(spark, output, brokers, ["incr"])

    assert summary2["load_id"] != summary1["load_id"]
    assert summary2["messages"] == 900
    assert summary2["bytes"] == sum(len(s.payload) for s in second)
    for part in summary2["partitions"]:
        assert part["start"] == state1["offsets"][f"incr/1-{part['partition']}"]
    rows = assert_exactly_once(output, first + second)
    check_partition_offsets(rows)
    by_load = {load_id: {sent for sent, row_load in rows if row_load == load_id} for load_id in
               (summary1["load_id"], summary2["load_id"])}
    assert by_load[summary1["load_id"]] == set(first)
    assert by_load[summary2["load_id"]] == set(second)
    assert load_dirs(output) == {("incr", summary1["load_id"]), ("incr", summary2["load_id"])}
    ends = log_ends(broker.port, "incr", 3)
    assert read_state(output)["offsets"] == {f"incr/1-{p}": end for p, end in enumerate(ends)}


def test_a_load_with_nothing_new_loads_nothing_and_leaves_the_offsets(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    sent = produce(brokers, "quiet", 200)
    summary1 = load(spark, output, brokers, ["quiet"])
    state1 = read_state(output)

    summary2 = load(spark, output, brokers, ["quiet"])

    assert summary2["messages"] == 0 and summary2["bytes"] == 0 and summary2["gaps"] == []
    assert all(p["start"] == p["end"] == p["log_end"] and p["messages"] == 0 for p in summary2["partitions"])
    assert load_dirs(output) == {("quiet", summary1["load_id"])}
    state2 = read_state(output)
    assert state2["offsets"] == state1["offsets"]
    assert state2["moving"] is None
    assert staged(output) == []
    assert_exactly_once(output, sent)


# --- 4: killed mid-way, then run again: exactly once ---------------------------------------


@pytest.mark.slow
def test_crash_after_write_commits_nothing_and_the_rerun_loads_everything_once(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=3, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    first = produce(brokers, "crashw", 300)
    summary1 = load(spark, output, brokers, ["crashw"])
    state1 = read_state(output)
    second = produce(brokers, "crashw", 600, first=300)

    crashed = run_cli("--broker-list", brokers, "--topic", "crashw", "--output", output,
                      env=cli_env(**{CRASH_ENV: "after_write"}))

    assert crashed.returncode == 17, crashed.stderr[-3000:]
    assert "crashing at after_write" in crashed.stderr
    assert staged(output), "the crashed load had written its files (to the staging area)"
    assert_exactly_once(output, first)  # nothing of the crashed load is visible
    assert read_state(output) == state1
    assert load_dirs(output) == {("crashw", summary1["load_id"])}

    summary3 = load(spark, output, brokers, ["crashw"])

    assert summary3["messages"] == 600
    rows = assert_exactly_once(output, first + second)
    check_partition_offsets(rows)
    assert {sent for sent, load_id in rows if load_id == summary3["load_id"]} == set(second)
    assert staged(output) == []
    ends = log_ends(broker.port, "crashw", 3)
    assert read_state(output)["offsets"] == {f"crashw/1-{p}": end for p, end in enumerate(ends)}


@pytest.mark.slow
def test_crash_after_commit_is_finished_by_the_next_load(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=3, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    sent = produce(brokers, "crashc", 600)
    ends = log_ends(broker.port, "crashc", 3)

    crashed = run_cli("--broker-list", brokers, "--topic", "crashc", "--output", output,
                      env=cli_env(**{CRASH_ENV: "after_commit"}))

    assert crashed.returncode == 17, crashed.stderr[-3000:]
    state = read_state(output)
    assert state["offsets"] == {f"crashc/1-{p}": end for p, end in enumerate(ends)}, "committed"
    assert state["moving"] and state["moving"]["moves"]
    crashed_id = state["moving"]["load_id"]
    assert staged(output), "the files were still staged"
    assert read_output(output) == []

    summary = load(spark, output, brokers, ["crashc"])  # nothing new: it only finishes the move

    assert summary["messages"] == 0
    rows = assert_exactly_once(output, sent)
    check_partition_offsets(rows)
    assert {load_id for _, load_id in rows} == {crashed_id}
    assert load_dirs(output) == {("crashc", crashed_id)}
    state = read_state(output)
    assert state["moving"] is None
    assert state["offsets"] == {f"crashc/1-{p}": end for p, end in enumerate(ends)}
    assert staged(output) == []

    more = produce(brokers, "crashc", 150, first=600)
    load(spark, output, brokers, ["crashc"])
    assert_exactly_once(output, sent + more)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_a_rerun_loads_everything_exactly_once(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=4, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    seed = int(os.environ.get("SPARK_LOADER_KILL_SEED", random.randrange(1 << 30)))  # to replay a failure
    rng = random.Random(seed)
    # A whole CLI load (JVM start included), as the tests before measured it (if any ran).
    typical = sum(CLI_DURATIONS) / len(CLI_DURATIONS) if CLI_DURATIONS else 20.0
    # Kill 0 comes at a random moment of a typical load. Most of a short load is the JVM
    # starting, so kill 1 comes at a random moment of the last seconds, once the plan is
    # logged, and kill 2 within the last half second, after the first task made the
    # staging directory: while the tasks write, or during the commit or the moves.
    plan = [("from the start", rng.uniform(1.0, typical)), ("after the plan", rng.uniform(0.0, 3.5)),
            ("after the job started", rng.uniform(0.0, 0.5))]
    sent = []
    outcomes = []
    for run, (since, delay) in enumerate(plan):
        sent += produce(brokers, "killed", 400, first=400 * run)
        log_path = tmp_path / f"kill-{run}.log"
        earlier = staging_dirs(output)  # left by the load killed before (this one removes them)
        summaries = set(saved_summaries(output))
        process = start_cli("--broker-list", brokers, "--topic", "killed", "--output", output, log_path=log_path)
        reached = {"from the start": lambda: True,
                   "after the plan": lambda: "with new data" in log_path.read_text(),
                   "after the job started": lambda: staging_dirs(output) - earlier}[since]
        wait_for(lambda: process.poll() is not None or reached(), CLI_TIMEOUT_S, since)
        try:
            process.wait(delay)
        except subprocess.TimeoutExpired:
            pass
        finished = process.poll()
        kill_group(process)
        log_text = (tmp_path / f"kill-{run}.log").read_text()
        assert process.returncode in (0, -signal.SIGKILL), (process.returncode, log_text[-3000:])
        outcomes.append((f"{delay:.2f}s {since}", finished, phase_reached(output, log_text, earlier, summaries)))
        # whatever was visible is no more than what was produced, and nothing twice
        rows = read_output(output)
        assert set(s for s, _ in rows) <= set(sent)
        assert len(rows) == len({s for s, _ in rows}), f"duplicates after kill {run} (seed {seed}, {outcomes})"

    summary = load(spark, output, brokers, ["killed"])

    context = f"seed {seed}, (kill, exit code before it, phase reached): {outcomes}"
    print(context)
    assert summary["gaps"] == [], context
    rows = assert_exactly_once(output, sent)
    check_partition_offsets(rows)
    state = read_state(output)
    assert state["moving"] is None, context
    ends = log_ends(broker.port, "killed", 4)
    assert state["offsets"] == {f"killed/1-{p}": end for p, end in enumerate(ends)}, context
    assert staged(output) == []


# --- 5: the lock ---------------------------------------------------------------------------


def test_a_second_load_exits_4_at_once_while_the_lock_is_held(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    sent = produce(brokers, "locked", 100)
    holder = LoaderState(str(output))
    holder.lock()
    try:
        result = run_cli("--broker-list", brokers, "--topic", "locked", "--output", output, timeout=60)
        assert result.returncode == 4, result.stderr[-3000:]
        assert f"another load is running on {output} (pid {os.getpid()})" in result.stderr
        assert result.seconds < 5, f"took {result.seconds:.1f}s to see the lock (a Spark session was started?)"
        with pytest.raises(LoadLockedError):
            load(spark, output, brokers, ["locked"])
        assert read_state(output) == {} and read_output(output) == []
    finally:
        holder.unlock()
    summary = load(spark, output, brokers, ["locked"])
    assert summary["messages"] == 100
    assert_exactly_once(output, sent)


# --- 6: data deleted by retention before it was loaded ---------------------------------------


@pytest.mark.slow
def test_a_gap_left_by_retention_is_reported_and_the_load_goes_on_from_the_earliest_offset(spark, broker_factory,
                                                                                          tmp_path):
    # Retention runs when a log is opened (and every log.cleanup.interval.mins, at least a
    # minute): tiny segments and size retention, then a restart, delete the old segments.
    broker = broker_factory("b1", num_partitions=2, brokerid=1, log_file_size=1024, log_retention_size=2048)
    output = tmp_path / "out"
    first = produce(broker_list(broker), "gap", 40)
    load(spark, output, broker_list(broker), ["gap"])
    loaded_to = [read_state(output)["offsets"][f"gap/1-{p}"] for p in range(2)]
    second = produce(broker_list(broker), "gap", 600, first=40)
    broker.stop()
    broker.start()  # another port: the broker list changes, the broker id (and the state key) does not
    brokers = broker_list(broker)
    earliest = earliest_offsets(broker.port, "gap", 2)
    ends = log_ends(broker.port, "gap", 2)
    assert all(e > loaded for e, loaded in zip(earliest, loaded_to)), (earliest, loaded_to)

    result = run_cli("--broker-list", brokers, "--topic", "gap", "--output", output)

    assert result.returncode == 0, result.stderr[-3000:]
    for p in range(2):
        assert f"GAP in gap/1-{p}: offsets {loaded_to[p]}..{earliest[p]} were deleted" in result.stderr
    (summary,) = [s for s in saved_summaries(output).values() if s["gaps"]]
    assert sorted(summary["gaps"], key=lambda g: g["partition"]) == [
        {"partition": f"gap/1-{p}", "from": loaded_to[p], "to": earliest[p]} for p in range(2)]
    assert json.loads(result.stdout) == summary
    kept = [s for s in second if s.offset >= earliest[s.partition]]
    assert 0 < len(kept) < len(second)
    assert summary["messages"] == len(kept)
    for part in summary["partitions"]:
        assert (part["start"], part["end"]) == (earliest[part["partition"]], ends[part["partition"]])
    rows = assert_exactly_once(output, first + kept)
    assert {s for s, load_id in rows if load_id == summary["load_id"]} == set(kept)
    assert read_state(output)["offsets"] == {f"gap/1-{p}": ends[p] for p in range(2)}

    # A stored offset past the log end (the log was recreated): read from the earliest offset again.
    state = read_state(output)
    state["offsets"]["gap/1-0"] = ends[0] + 1000
    Path(output, "_mpbroker", "state.json").write_text(json.dumps(state))
    summary = load(spark, output, brokers, ["gap"])
    assert summary["gaps"] == [{"partition": "gap/1-0", "from": ends[0] + 1000, "to": earliest[0]}]
    assert summary["messages"] == sum(1 for s in kept if s.partition == 0)
    assert read_state(output)["offsets"] == {f"gap/1-{p}": ends[p] for p in range(2)}


# --- 7: several topics; --whitelist with ZooKeeper -----------------------------------------


def test_several_topics_in_one_load(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    alpha = produce(brokers, "alpha", 300)
    beta = produce(brokers, "beta", 200)
    produce(brokers, "gamma", 100)  # not named: not loaded

    summary = load(spark, output, brokers, ["alpha", "beta", "alpha"])  # a topic named twice is loaded once

    assert summary["messages"] == 500
    rows = assert_exactly_once(output, alpha + beta)
    check_partition_offsets(rows)
    assert load_dirs(output) == {("alpha", summary["load_id"]), ("beta", summary["load_id"])}
    assert sorted(read_state(output)["offsets"]) == ["alpha/1-0", "alpha/1-1", "beta/1-0", "beta/1-1"]
    assert sorted((p["topic"], p["partition"]) for p in summary["partitions"]) == [
        ("alpha", 0), ("alpha", 1), ("beta", 0), ("beta", 1)]


def test_whitelist_with_zookeeper_loads_every_matching_topic(spark, broker_factory, zk_connect, tmp_path):
    b1 = broker_factory("b1", num_partitions=2, brokerid=1, enable_zookeeper="true", zk_connect=zk_connect)
    b2 = broker_factory("b2", num_partitions=3, brokerid=2, enable_zookeeper="true", zk_connect=zk_connect)
    brokers = broker_list(b1, b2)
    output = tmp_path / "out"
    one = produce(brokers, "wl.one", 300)
    two = produce(brokers, "wl.two", 200)
    other = produce(brokers, "other", 100)
    client = wait_for(lambda: try_start_client(zk_connect), 30, "a ZooKeeper session")
    try:
        for topic in ("wl.one", "wl.two", "other"):
            wait_for(lambda: {p.broker_id for p in read_topic_partitions(client, topic)} == {1, 2}, 20,
                     f"{topic} registered by both brokers")
    finally:
        close_client(client)

    summary = load(spark, output, zookeeper=zk_connect, whitelist=r"wl\..*")

    assert summary["messages"] == 500
    assert_exactly_once(output, one + two)
    assert sorted(read_state(output)["offsets"]) == sorted(
        [f"wl.one/1-{p}" for p in range(2)] + [f"wl.one/2-{p}" for p in range(3)]
        + [f"wl.two/1-{p}" for p in range(2)] + [f"wl.two/2-{p}" for p in range(3)])

    more = produce(brokers, "wl.two", 50, first=200)
    summary = load(spark, output, zookeeper=zk_connect, whitelist=r"wl\..*", topics=["other"])
    assert summary["messages"] == 150
    assert_exactly_once(output, one + two + more + other)


# --- 8: --max-bytes-per-partition ----------------------------------------------------------


@pytest.mark.parametrize("codec", ["", "gzip"])
def test_max_bytes_per_partition_splits_the_data_over_loads_at_message_boundaries(spark, broker_factory, tmp_path,
                                                                                  codec):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    # gzip: sets of 10 messages, each one compressed wrapper message whose messages share its offset
    sent = produce(brokers, "capped", 1000, codec=codec, batch=10)
    ends = log_ends(broker.port, "capped", 2)
    boundaries = {p: sorted({s.offset for s in sent if s.partition == p} | {ends[p]}) for p in range(2)}
    largest = max(b - a for p in range(2) for a, b in zip(boundaries[p], boundaries[p][1:]))
    cap = (max(ends) + 1) // 2 + largest  # two loads are enough; the first stops inside every partition
    assert cap < min(ends), (cap, ends)

    first = load(spark, output, brokers, ["capped"], max_bytes_per_partition=cap)
    for part in first["partitions"]:
        p = part["partition"]
        assert part["start"] == 0
        assert part["end"] in boundaries[p], f"{part} does not end at a message boundary"
        assert part["end"] == max(b for b in boundaries[p] if b <= cap), f"{part}: not the last boundary <= {cap}"
        assert part["messages"] == sum(1 for s in sent if s.partition == p and s.offset < part["end"])
    assert read_state(output)["offsets"] == {f"capped/1-{p['partition']}": p["end"] for p in first["partitions"]}
    assert_exactly_once(output, [s for s in sent if s.offset < first_end(first, s.partition)])

    second = load(spark, output, brokers, ["capped"], max_bytes_per_partition=cap)
    for part in second["partitions"]:
        assert part["start"] == first_end(first, part["partition"])
        assert part["end"] == ends[part["partition"]]
    assert first["messages"] + second["messages"] == len(sent)
    rows = assert_exactly_once(output, sent)
    if not codec:
        check_partition_offsets(rows)
    assert load(spark, output, brokers, ["capped"], max_bytes_per_partition=cap)["messages"] == 0


# --- 10: an unknown topic is refused, before Spark starts, unless waiting for it is intended ------

NO_MASTER = ("--master", "no-such-master")  # a Spark session would fail: the command must end before one


def test_an_unknown_topic_is_refused_with_the_registered_name_it_is_close_to(spark, broker_factory, zk_connect,
                                                                             tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1, enable_zookeeper="true", zk_connect=zk_connect)
    brokers = broker_list(broker)
    views = produce(brokers, "page-views", 100)
    produce(brokers, "clicks", 50)
    wait_registered(zk_connect, ["page-views", "clicks"], {1})
    output = tmp_path / "out"
    common = ("--zookeeper", zk_connect, "--output", output, *NO_MASTER)

    typo = run_cli(*common, "--topic", "page-view", timeout=60)
    assert typo.returncode == 2, typo.stderr[-3000:]
    assert (f"unknown topic 'page-view' (did you mean 'page-views'?): no broker registered it at {zk_connect}; "
            f"--allow-missing-topics loads it once it exists") in typo.stderr
    second = run_cli(*common, "--topic", "page-views", "--topic", "clickz", timeout=60)
    assert second.returncode == 2, second.stderr[-3000:]
    assert "unknown topic 'clickz' (did you mean 'clicks'?)" in second.stderr
    assert "'page-views'" not in second.stderr  # only the unknown one is named
    for result in (typo, second):
        assert "Traceback" not in result.stderr and result.stdout == ""
    with pytest.raises(UnknownTopicError, match="'page-view'"):
        load(spark, output, zookeeper=zk_connect, topics=["page-view"])
    assert read_state(output) == {} and read_output(output) == []

    # Waiting for it is intended: a warning naming it, nothing loaded, exit 0 (no Spark needed).
    waiting = run_cli(*common, "--topic", "page-view", "--allow-missing-topics", timeout=60)
    assert waiting.returncode == 0, waiting.stderr[-3000:]
    assert f"'page-view': no broker registered it at {zk_connect}; nothing of it to load yet" in waiting.stderr
    assert json.loads(waiting.stdout)["partitions"] == []

    # Once it exists, the same load takes it.
    later = produce(brokers, "page-view", 30)
    wait_registered(zk_connect, ["page-view"], {1})
    summary = load(spark, output, zookeeper=zk_connect, topics=["page-view", "page-views"])
    assert summary["messages"] == 130
    assert_exactly_once(output, views + later)


def test_a_whitelist_that_matches_nothing_yet_is_not_an_error(zk_connect, tmp_path):
    """The cron line's ``--whitelist '.*'`` on a cluster where no topic is registered yet."""
    empty = zk_connect + "-empty"  # a chroot nothing was registered in
    result = run_cli("--zookeeper", empty, "--whitelist", ".*", "--output", tmp_path / "out", *NO_MASTER, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"--whitelist '.*' matches none of the 0 topics registered at {empty} (yet)" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["partitions"] == [] and summary["messages"] == 0
    named = run_cli("--zookeeper", empty, "--topic", "t", "--output", tmp_path / "out", *NO_MASTER, timeout=60)
    assert named.returncode == 2, named.stderr[-3000:]
    assert "no topic is registered there at all: is the chroot right?" in named.stderr


def test_with_a_broker_list_a_topic_no_broker_holds_a_message_of_is_unknown(spark, broker_factory, tmp_path):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    output = tmp_path / "out"
    views = produce(brokers, "page-views", 100)
    load(spark, output, brokers, ["page-views"])

    typo = run_cli("--broker-list", brokers, "--topic", "page-view", "--output", output, *NO_MASTER, timeout=60)

    assert typo.returncode == 2, typo.stderr[-3000:]
    # the 0.7 protocol lists no topics: the names close to it come from what the output holds
    assert (f"unknown topic 'page-view' (did you mean 'page-views'?): no broker of --broker-list {brokers} "
            f"holds a message of it") in typo.stderr
    with pytest.raises(UnknownTopicError, match="'later'"):
        load(spark, output, brokers, ["page-views", "later"])
    waiting = load(spark, output, brokers, ["page-views", "later"], allow_missing_topics=True)
    assert waiting["messages"] == 0
    later = produce(brokers, "later", 40)
    assert load(spark, output, brokers, ["page-views", "later"])["messages"] == 40
    assert_exactly_once(output, views + later)


# --- 11: reading the output: the calls the README gives -----------------------------------------


def readme_python_block(heading: str) -> str:
    """The first ```python block after the README heading ``heading`` (the whole line)."""
    text = (REPO / "README.md").read_text()
    return text.split(f"\n{heading}\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_calls_read_the_topic_load_date_and_load_id_columns(spark, broker_factory, tmp_path, monkeypatch):
    broker = broker_factory("b1", num_partitions=2, brokerid=1)
    brokers = broker_list(broker)
    monkeypatch.setenv("HOME", str(tmp_path))  # the README reads ~/mpbroker-parquet
    output = tmp_path / "mpbroker-parquet"
    sent = produce(brokers, "007", 60) + produce(brokers, "2024", 40)  # names a type inference takes for numbers
    summary = load(spark, output, brokers, ["007", "2024"])
    assert "topic" not in ds.dataset(str(output), format="parquet").schema.names  # why the README names the call

    code = readme_python_block("### Scheduled loads into Parquet: `mpbroker-spark-load`")
    namespace = {"spark": spark}
    try:
        exec(code, namespace)  # noqa: S102 (the README's own code, as written)
        frame = namespace["frame"]
        spark_counts = {row["topic"]: row["count"] for row in frame.groupBy("topic").count().collect()}
    finally:
        spark.conf.unset("spark.sql.sources.partitionColumnTypeInference.enabled")

    table = namespace["table"]
    assert set(table.column_names) == {"broker", "partition", "offset", "payload", "topic", "load_date", "load_id"}
    rows = table.to_pylist()
    assert Counter(row["topic"] for row in rows) == {"007": 60, "2024": 40}
    assert {(row["load_date"], row["load_id"]) for row in rows} == {(summary["started"][:10], summary["load_id"])}
    assert sorted((r["topic"], r["broker"], r["partition"], r["offset"], r["payload"]) for r in rows) == sorted(sent)
    assert spark_counts == {"007": 60, "2024": 40}
