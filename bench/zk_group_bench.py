"""How long a ZooKeeper consumer group of 0.7 clients takes to settle after a member joins, leaves or dies
(the modern clients' groups: ``bench/group_bench.py``).

    python -m bench.zk_group_bench [--consumers 10] [--partitions 40] [--repeats 3]
                                [--backoff-ms 2000,200] [--session-ms 6000]

A real ZooKeeper and two brokers (``partitions / 2`` partitions each) on this machine;
``--consumers`` members, each its own process (``bench/zk_group_member.py``), in one
group on one topic. An observer polls ZooKeeper every 5 ms. "Settled" means: every
partition has an owner node and the owners are exactly the range assignment over the
members registered at that moment. The clock starts when the joining member's
registration appears, when a leaving member (SIGTERM: commit, release, leave) is
signalled, or when a member is killed with SIGKILL (whose partitions wait for its
session to time out). Each event is repeated ``--repeats`` times for each
``rebalance.backoff.ms``; the table shows the median and the worst.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench.broker_process import BenchBroker
from bench.common import print_table, write_results
from mpbroker.clients.groups.rebalance import assign_range
from mpbroker.clients.producer.producer import Producer
from mpbroker.registry import layout
from mpbroker.registry.zk_client import ensure_chroot
from mpbroker.testing.local_zookeeper import ZooKeeperServer

TOPIC = "settle"
GROUP = "bench"
POLL_S = 0.005


class Observer:
    def __init__(self, zk_connect: str, partitions: list):
        self.zk = KazooClient(zk_connect)
        self.zk.start(10)
        self.partitions = partitions

    def members(self) -> list:
        try:
            return self.zk.get_children(layout.consumer_ids_path(GROUP))
        except NoNodeError:
            return []

    def settled(self) -> bool:
        members = self.members()
        expected = assign_range(self.partitions, [layout.stream_id(m, 0) for m in members])
        want = {p.node(): stream for stream, parts in expected.items() for p in parts}
        path = layout.owners_path(GROUP, TOPIC)
        try:
            nodes = self.zk.get_children(path)
            if sorted(nodes) != sorted(want):
                return False
            return all(self.zk.get(f"{path}/{node}")[0].decode() == want[node] for node in nodes)
        except NoNodeError:
            return False

    def wait_settled(self, start: float, timeout: float = 120.0) -> float:
        while time.monotonic() - start < timeout:
            if self.settled():
                return time.monotonic() - start
            time.sleep(POLL_S)
        raise RuntimeError(f"the group did not settle within {timeout}s")

    def wait_members(self, count: int, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.members()) == count:
                return time.monotonic()
            time.sleep(POLL_S)
        raise RuntimeError(f"the group did not reach {count} members")


def start_member(zk_connect: str, backoff_ms: int, session_ms: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.zk_group_member", zk_connect, GROUP, TOPIC,
                             str(backoff_ms), str(session_ms)],
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_backoff(zk_connect: str, observer: Observer, args, backoff_ms: int) -> dict:
    members = [start_member(zk_connect, backoff_ms, args.session_ms) for _ in range(args.consumers - 1)]
    observer.wait_members(args.consumers - 1)
    observer.wait_settled(time.monotonic())
    times = {"join": [], "leave": [], "kill": []}
    try:
        for _ in range(args.repeats):
            before = len(observer.members())
            members.append(start_member(zk_connect, backoff_ms, args.session_ms))
            joined = observer.wait_members(before + 1)
            times["join"].append(observer.wait_settled(joined))
            leaving = members.pop()
            start = time.monotonic()
            leaving.send_signal(signal.SIGTERM)
            times["leave"].append(observer.wait_settled(start))
            leaving.wait(30)
            members.append(start_member(zk_connect, backoff_ms, args.session_ms))
            observer.wait_members(before + 1)
            observer.wait_settled(time.monotonic())
            victim = members.pop()
            start = time.monotonic()
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            observer.wait_members(before)
            times["kill"].append(observer.wait_settled(start))
    finally:
        for member in members:
            member.send_signal(signal.SIGTERM)
        for member in members:
            try:
                member.wait(30)
            except subprocess.TimeoutExpired:
                member.kill()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--consumers", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=40, help="in all, over two brokers")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backoff-ms", default="2000,200", help="rebalance.backoff.ms values to try")
    parser.add_argument("--session-ms", type=int, default=6000, help="zk.sessiontimeout.ms of the members")
    args = parser.parse_args()
    per_broker = args.partitions // 2
    rows, data = [], {"consumers": args.consumers, "partitions": per_broker * 2, "session_ms": args.session_ms,
                      "runs": {}}
    with tempfile.TemporaryDirectory(prefix="mpbroker-group-bench-") as directory, \
            ZooKeeperServer(os.path.join(directory, "zk")) as zookeeper:
        zk_connect = zookeeper.connect_string("/bench")
        ensure_chroot(zk_connect, 10)
        brokers = [BenchBroker(directory, enable_zookeeper="true", zk_connect=zk_connect, brokerid=i,
                               num_partitions=per_broker, num_workers=1) for i in (1, 2)]
        for broker in brokers:
            broker.start()
        try:
            producer = Producer(broker_list=",".join(f"{i}:127.0.0.1:{b.port}" for i, b in zip((1, 2), brokers)))
            for index in range(20 * per_broker):
                producer.send(TOPIC, [b"x" * 200], key=str(index).encode())
            producer.close()
            partitions = [layout.PartitionId(b, p) for b in (1, 2) for p in range(per_broker)]
            observer = Observer(zk_connect, partitions)
            deadline = time.monotonic() + 30
            while len(observer.zk.get_children(layout.topic_path(TOPIC)) if observer.zk.exists(
                    layout.topic_path(TOPIC)) else []) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the brokers did not register the topic")
                time.sleep(0.05)
            for backoff_ms in (int(v) for v in args.backoff_ms.split(",")):
                times = run_backoff(zk_connect, observer, args, backoff_ms)
                data["runs"][str(backoff_ms)] = times
                for event, values in times.items():
                    rows.append([backoff_ms, event, f"{statistics.median(values):.2f}", f"{max(values):.2f}",
                                 len(values)])
            observer.zk.stop()
            observer.zk.close()
        finally:
            for broker in brokers:
                broker.__exit__(None, None, None)
    table = print_table(f"Group settle time: {args.consumers} consumers, {per_broker * 2} partitions, "
                        f"session {args.session_ms} ms (seconds)",
                        ["rebalance.backoff.ms", "event", "median s", "worst s", "runs"], rows)
    write_results("zk_group", table, data)


if __name__ == "__main__":
    main()
