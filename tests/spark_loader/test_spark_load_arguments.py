"""``mpbroker-spark-load``'s bad arguments and unreachable servers: each ends the command
with its exit code (2: usage, 3: a server) and a message naming the problem, before any
Spark session starts, with nothing written."""

import pytest

from tests.spark_loader.loads import (
    CLI_TIMEOUT_S,
    HOST,
    closed_port,
    kill_group,
    read_output,
    read_state,
    run_cli,
    start_cli,
)


@pytest.mark.parametrize("args", [
    [],  # nothing
    ["--broker-list", "127.0.0.1:1", "--topic", "t"],  # no --output
    ["--broker-list", "127.0.0.1:1", "--zookeeper", "127.0.0.1:1", "--topic", "t", "--output", "o"],  # both
    ["--broker-list", "127.0.0.1:1", "--output", "o"],  # no topic, no whitelist
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--output", "o", "--max-bytes-per-partition", "-1"],
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--output", "o", "--fetch-size", "0"],
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--output", "o", "--max-bytes-per-partition", "lots"],
    # what a user types when a second topic goes wrong: never a load of the first alone
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--topic", "--output", "o"],  # the second name left out
    ["--broker-list", "127.0.0.1:1", "--output", "o", "--topic", "t", "--topic"],  # ... at the end
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "u", "--output", "o"],  # two names after one --topic
    ["--broker-list", "127.0.0.1:1", "--topic", "t,u", "--output", "o"],  # a list in one --topic
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--topic", "", "--output", "o"],  # an empty name
    ["--broker-list", "127.0.0.1:1", "--topic", "t", "--topic=", "--output", "o"],
])
def test_bad_arguments_exit_2(args, tmp_path):
    result = run_cli(*[str(tmp_path / "out") if arg == "o" else arg for arg in args], timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip()


def test_a_whitelist_without_zookeeper_a_bad_topic_and_unreachable_servers_end_it_before_spark(tmp_path):
    """Errors found before a Spark session is started (``--master`` names no master: a
    session would fail); the four commands run side by side."""
    port = closed_port()
    cases = {
        "whitelist without zookeeper": (["--broker-list", f"{HOST}:{port}", "--whitelist", "a.*"], 2,
                                        "--whitelist needs --zookeeper"),
        "bad topic name": (["--broker-list", f"{HOST}:{port}", "--topic", "no/slash"], 2, "no/slash"),
        "closed broker port": (["--broker-list", f"{HOST}:{port}", "--topic", "t"], 3, f"{HOST}:{port}"),
        "closed zookeeper port": (["--zookeeper", f"{HOST}:{port}", "--zk-timeout-ms", "1000", "--topic", "t"], 3,
                                  "ZooKeeper"),
    }
    processes = {name: start_cli(*args, "--output", tmp_path / f"out{i}", "--master", "no-such-master",
                                 log_path=tmp_path / f"{i}.log")
                 for i, (name, (args, _, _)) in enumerate(cases.items())}
    try:
        for i, (name, (_, code, text)) in enumerate(cases.items()):
            processes[name].wait(CLI_TIMEOUT_S)
            output = (tmp_path / f"{i}.log").read_text()
            assert processes[name].returncode == code, f"{name}: {output[-3000:]}"
            assert text in output, f"{name}: {output[-3000:]}"
            assert "Traceback" not in output, f"{name}: {output[-3000:]}"
    finally:
        for process in processes.values():
            if process.poll() is None:
                kill_group(process)
    for i in range(len(cases)):
        assert read_output(tmp_path / f"out{i}") == [] and read_state(tmp_path / f"out{i}") == {}
