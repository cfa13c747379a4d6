"""The README's "Replicated topics" block, run as written: three brokers started by its
loop, the topic created and described, two lines produced with --acks replicated, and
the offsets asked of the leaders. Only where the README names this machine's things do
we put the test's: its ZooKeeper for localhost:2181, a scratch directory for $HOME, and
port 0 for 909$id and 919$id (so runs in parallel do not collide)."""

import os
import signal
import subprocess
import time

from mpbroker.registry import layout, topic_admin
from tests.clients.helpers import wait_for
from tests.readme.readme_blocks import REPO, block, commands


def test_the_readme_replication_block(zk_connect, zk_client, tmp_path):
    lines = commands(block("replication"))
    assert len(lines) == 5
    lines = [line.replace("localhost:2181/mpbroker", zk_connect).replace("$HOME", str(tmp_path))
             .replace("port=909$id", "port=0").replace("port=919$id", "port=0") for line in lines]
    start, create, describe, produce, offsets = lines
    with open(tmp_path / "brokers.log", "w") as output:
        brokers = subprocess.Popen(["bash", "-c", start + "; wait"], cwd=REPO, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: topic_admin.live_brokers(zk_client) == [1, 2, 3], 60, what="three brokers registered")

        def run(line: str) -> subprocess.CompletedProcess:
            return subprocess.run(["bash", "-c", line], cwd=REPO, capture_output=True, text=True, timeout=120)

        created = run(create)
        assert created.returncode == 0 and "4 partitions, replication factor 3" in created.stdout, created.stderr
        wait_for(lambda: run(describe).stdout.count("high_watermark: 0") == 4, 60,
                 what="every partition led, its leader knowing it")
        described = run(describe).stdout.splitlines()
        assert len(described) == 4 and all("replicas: " in line and "isr: " in line for line in described)
        produced = run(produce)
        assert produced.returncode == 0, produced.stderr
        found = run(offsets)
        assert found.returncode == 0, found.stderr
        ends = [int(line.rsplit(":", 1)[1]) for line in found.stdout.splitlines()]
        assert len(ends) == 4 and sum(ends) > 0  # the two lines, acknowledged by every replica
        assert zk_client.exists(layout.topic_path("clicks"))
    finally:
        try:
            os.killpg(brokers.pid, signal.SIGTERM)
            brokers.wait(90)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(brokers.pid, signal.SIGKILL)
        time.sleep(0.1)
