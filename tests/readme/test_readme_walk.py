"""The README, walked top to bottom as a new user does: every ```sh block runs as written,
in order, in a fresh copy of the repository (``tests/readme/walk.py``), or is covered by the
test its marker names, or says why it is not run (``tests/readme/readme_blocks.py``).

What the walk adds is only what the README expects to be there: kcat (tests/run.sh
installs it), a ZooKeeper on localhost:2181 (the README installs one as a service; ``test_zookeeper_recipe.py`` runs that
recipe), and for the mirror and the audit two source clusters and a target, each a broker
registered under a chroot of that ZooKeeper (``/east``, ``/west``, ``/central``), with
messages produced at the sources. Ports as the README writes them: 9092, 9093, 2181, 9100.

One test, in the README's order, because each part builds on the one before: the quick
start makes the venv the rest uses; the standalone broker's topics are those the ZooKeeper
broker registers (same ``log.dir``); the group consumes what the console producer wrote;
the audit checks what the mirror copied; the Spark load reads the topics of the clients."""

import json
import re
import signal
import socket
import time

import pytest
from kazoo.client import KazooClient

from mpbroker.testing.local_broker import LocalBroker
from mpbroker.testing.local_zookeeper import ZooKeeperServer
from tests.readme import readme_blocks
from tests.readme.walk import Walk

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

README_PORTS = (9092, 9093, 2181, 9100)


def test_every_block_is_walked_covered_or_says_why():
    blocks = readme_blocks.blocks()
    assert blocks, "README.md has no ```sh block"
    for block in blocks:
        if block.covered_by:
            covered = readme_blocks.REPO / block.covered_by
            assert covered.is_file(), f"README.md line {block.line}: {block.covered_by} does not exist"
            assert block.name in covered.read_text(), f"{block.covered_by} never names the block {block.name!r}"
        elif not block.name:
            assert block.reason, f"README.md line {block.line}: a block not walked must say why"
    walked = set(readme_blocks.walked())
    assert walked == set(WALKED), f"walked by this test: {sorted(WALKED)}; marked in the README: {sorted(walked)}"


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _stop(background, sig=signal.SIGTERM, timeout: float = 60) -> int:
    background.process.send_signal(sig)
    return background.wait(timeout)


WALKED = ("quick-start", "kafka-clients", "kafka-clients-install", "kafka-clients-python", "kafka-clients-groups",
          "clients-python",
          "console-tools", "groups", "mirror", "audit", "spark-source", "spark-load")


def test_the_readme_runs_as_written_from_a_fresh_clone(tmp_path):
    taken = [port for port in README_PORTS if not _free(port)]
    assert not taken, f"the README's ports {taken} are taken on this machine: the walk runs its commands as written"
    blocks = readme_blocks.walked()
    walk = Walk(tmp_path)

    # The quick start: a venv in the fresh copy, the package, the demo.
    (quick_start,) = blocks["quick-start"].commands
    demo = walk.run(quick_start, timeout=600)
    assert "gzip-compressed" in demo.stdout and "broker stopped gracefully (exit code 0)" in demo.stdout, demo.stdout

    # "Running a broker": its serve line (tests/ops/test_readme_ctl.py runs the ctl lines after it).
    running = readme_blocks.commands(readme_blocks.block("running-a-broker"))
    serve, shutdown = running[0], running[-1]
    assert "shutdown" in shutdown
    with walk.background(serve, "standalone-broker") as broker:
        walk.wait_port(9092, background=broker)
        walk.wait_port(9093, background=broker)
        _walk_kafka_clients(walk, blocks)
        _walk_clients(walk, blocks)
        walk.run(shutdown, timeout=120)
        assert broker.wait(60) == 0, broker.output()

    with ZooKeeperServer(tmp_path / "zookeeper", 2181) as zookeeper:
        zk = KazooClient(hosts=zookeeper.hosts)
        zk.start(timeout=30)
        try:
            (zk_serve,) = readme_blocks.commands(readme_blocks.block("zookeeper-broker"))
            with walk.background(zk_serve, "zookeeper-broker") as broker:
                walk.wait_port(9092, background=broker)
                _wait(lambda: zk.exists("/mpbroker/brokers/topics/clicks/1"), 60, "broker 1 registering its topics")
                _walk_groups(walk, blocks)
                _walk_mirror_and_audit(walk, blocks, zookeeper, zk, tmp_path)
                _walk_spark_load(walk, blocks)
                assert _stop(broker) == 0, broker.output()
        finally:
            zk.stop()
            zk.close()


def _walk_kafka_clients(walk: Walk, blocks) -> None:
    listed, produced, consumed = blocks["kafka-clients"].commands
    assert "broker 0 at " in walk.run(listed, timeout=60).stdout
    walk.run(produced, timeout=60)
    printed = walk.run(consumed, timeout=60).stdout
    assert re.search(r"^u1 /home \(offset \d+\)$", printed, re.M), printed
    assert re.search(r"^u2 /about \(offset \d+\)$", printed, re.M), printed
    (install,) = blocks["kafka-clients-install"].commands
    walk.run(install, timeout=600)
    ran = walk.run(".venv/bin/python -", input=blocks["kafka-clients-python"].text, timeout=120)
    assert "b'o-1' b'{\"sku\": 42}' [('source', b'web')]" in ran.stdout, ran.stdout
    split = re.search(r"^\[(\[[\d, ]*\]), (\[[\d, ]*\])\]$", ran.stdout, re.M)
    assert split and split.group(1) != "[]" and split.group(2) != "[]", ran.stdout  # both readers hold partitions
    (describe,) = blocks["kafka-clients-groups"].commands
    described = walk.run(describe, timeout=60).stdout
    assert "order-readers" in described and "orders" in described, described


def _walk_clients(walk: Walk, blocks) -> None:
    code = blocks["clients-python"].text
    ran = walk.run(".venv/bin/python -", input=code, timeout=120)
    first = ran.stdout.split("\n", 1)[0].split()
    assert len(first) == 3 and all(field.isdigit() for field in first), ran.stdout  # partition offset next_offset
    assert "b'/home'" in ran.stdout and "b'/about'" in ran.stdout, ran.stdout

    produce, consume, by_partition, by_time, get_offsets = blocks["console-tools"].commands
    walk.run(produce, timeout=120)
    printed = walk.run(consume, timeout=120).stdout
    # the partition, the two offsets, the line's payload: the format the README shows
    assert re.search(r"^0\toffset=\d+ next_offset=\d+\t/home$", printed, re.M), printed
    assert "/about" in printed
    assert "/home" in walk.run(by_partition, timeout=120).stdout
    assert "/about" in walk.run(by_time, timeout=120).stdout  # a time before every segment: from the start
    assert walk.run(get_offsets, timeout=60).stdout.strip() == "page-views:0:0"


def _walk_groups(walk: Walk, blocks) -> None:
    consume, groups, names, describe, plan, execute, delete = blocks["groups"].commands
    consumed = walk.run(consume, timeout=120).stdout
    assert "/home" in consumed and "/about" in consumed, consumed
    assert "views" in walk.run(groups, timeout=60).stdout
    assert walk.run(names, timeout=60).stdout.split() == ["views"]
    assert "page-views" in walk.run(describe, timeout=60).stdout
    assert "dry run" in walk.run(plan, timeout=60).stdout
    walk.run(execute, timeout=60)
    walk.run(delete, timeout=60)
    assert walk.run(names, timeout=60).stdout.split() == []


def _cluster(tmp_path, zookeeper, name: str, brokerid: int) -> LocalBroker:
    return LocalBroker(tmp_path / name, num_workers=1, num_partitions=2, brokerid=brokerid,
                       enable_zookeeper="true", zk_connect=zookeeper.connect_string(f"/{name}"),
                       log_default_flush_interval_ms=50).start()


def _walk_mirror_and_audit(walk: Walk, blocks, zookeeper, zk, tmp_path) -> None:
    clusters = [_cluster(tmp_path, zookeeper, name, brokerid)
                for name, brokerid in (("east", 1), ("west", 2), ("central", 3))]
    try:
        lines = "".join(f"/page-{i}\n" for i in range(300))
        walk.run("mpbroker-console-producer --zookeeper localhost:2181/east --topic page-views --audit --acks flush",
                 input=lines, timeout=120)
        walk.run("mpbroker-console-producer --zookeeper localhost:2181/west --topic logs-app --acks flush",
                 input="started\n", timeout=120)
        first, second = blocks["mirror"].commands

        def central_has(topic: str, count: int):
            read = walk.run(f"mpbroker-console-consumer --zookeeper localhost:2181/central --topic {topic} "
                            f"--group walk-{topic}-{time.monotonic_ns()} --from-beginning --timeout-ms 1500 --wait-for-topic "
                            "--strip-envelopes",
                            timeout=120)
            return len(read.stdout.splitlines()) >= count

        with walk.background(first, "mirror-east") as mirror:
            _wait(lambda: central_has("page-views", 300), 120, "the mirror copying page-views to central")
            assert _stop(mirror) == 0, mirror.output()
        with walk.background(second, "mirror-two-sources") as mirror:
            _wait(lambda: central_has("logs-app", 1), 120, "the mirror copying west's logs-app to central")
            assert _stop(mirror) == 0, mirror.output()

        (audit,) = blocks["audit"].commands
        report = walk.run(audit, timeout=120)
        assert "page-views" in report.stdout, report.stdout
    finally:
        for broker in clusters:
            broker.stop()
            broker.close()


def _walk_spark_load(walk: Walk, blocks) -> None:
    install, load = blocks["spark-load"].commands
    walk.run(install, timeout=900)
    ran = walk.run(".venv/bin/python -", input=blocks["spark-source"].text, timeout=600)
    assert re.search(r"^\|.*\|page-views *\|", ran.stdout, re.M), ran.stdout  # a row of the batch query's show()
    counted = re.search(r"^(\d+) rows in ", ran.stdout, re.M)
    assert counted and int(counted.group(1)) >= 4, ran.stdout
    loaded = walk.run(load, timeout=600)
    summary = json.loads(loaded.stdout[loaded.stdout.index("{"):])
    assert summary["messages"] >= 4, summary  # page-views from the console tools, clicks from the clients
    assert (walk.home / "mpbroker-parquet" / "topic=clicks").is_dir()
