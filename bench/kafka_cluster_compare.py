"""The three-node section of ``bench.kafka_compare``: replication factor 3, acks=all, on a
cluster of each (``bench.kafka_peer``: ``mpbroker_cluster``, a ZooKeeper and three
brokers; ``kafka_cluster``, three KRaft JVMs), the same settings on both (``fair(3)``:
RF 3, ``min.insync.replicas`` 2, no flush during a run, 1 GiB segments, one partition).
Runs interleaved (mpbroker cluster, Kafka cluster, mpbroker cluster, ...), one cluster up
at a time, each run a fresh cluster in a directory of its own, removed afterwards.

A run, in this order (rows keyed as ``kafka_compare``'s, its table shows them):

- ``rf3_startup_s``: from the cluster's start until the first node's Kafka listener
  answers ApiVersions and a Metadata listing three brokers (Kafka's storage format is
  done before, not timed; mpbroker's ZooKeeper start is inside it: it is part of the cluster).
- warm-up, not measured: ``warmup`` messages produced with acks=all to an RF 3 topic of
  its own and consumed (the JVMs compile their hot paths, replication's included).
- ``rf3_produce_acksall``: ``rdkafka_performance -P -a -1``, N messages of 200 B,
  ``linger.ms`` 5, to partition 0 of a fresh topic created beforehand with CreateTopics
  (replication factor 3) and waited for until Metadata shows its leader and an ISR of
  three: msg/s by the program's clock.
- ``rf3_consume``: ``rdkafka_performance -C`` of that topic's N messages from the beginning.
- ``cpu_rf3_produce_acksall``: the CPU seconds (user + system, /proc) every process of the
  cluster spent over the produce row, per million messages: Kafka's three JVMs; mpbroker's
  three brokers' process trees AND the ZooKeeper JVM (Kafka's controllers run inside its
  JVMs, so mpbroker's cluster cost includes its coordinator too). Each run also keeps the
  CPU by process (``by_process``: mpbroker's ``b<id> acceptor``, ``b<id> worker <slot>``...,
  Kafka's ``node <id>``) and by role (``by_role``: the leader's acceptor, workers, ...; the
  followers', summed; ZooKeeper; Kafka's leader JVM and followers' JVMs), for finding where
  the time goes; the notes give the medians by role.
"""

import os
import shutil
import socket
import statistics
import struct
import tempfile
import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from bench import rdkafka_perf
from bench.kafka_peer import fair, kafka_cluster, mpbroker_cluster, timed_start
from mpbroker.testing.local_zookeeper import ZOOKEEPER_JAR
from mpbroker.testing.process_cpu import cpu_seconds, tree_cpu_seconds

NODES = 3
BROKERS = ("mpbroker", "kafka")
# row -> (label, unit, higher is better), as kafka_compare.ROWS
ROWS = {
    "rf3_produce_acksall": ("3 nodes, RF 3: produce, rdkafka_performance, acks=all", "msg/s", True),
    "rf3_consume": ("3 nodes, RF 3: consume, rdkafka_performance", "msg/s", True),
    "cpu_rf3_produce_acksall": ("3 nodes, RF 3: cluster CPU per million messages, produce acks=all (+ZooKeeper)",
                                "s", False),
    "rf3_startup_s": ("3 nodes: start-up until Metadata lists all three (+ZooKeeper)", "s", False),
}
QUIET = {"log_level": 3}


def missing() -> str:
    """Why the section cannot run here ('' if it can): ZooKeeper for mpbroker's cluster."""
    return "" if os.path.exists(ZOOKEEPER_JAR) else f"{ZOOKEEPER_JAR} is missing (apt-get install zookeeper)"


def create_replicated_topic(bootstrap: str, topic: str, replicas: int = NODES, timeout: float = 60.0) -> int:
    """CreateTopics of ``topic`` (one partition, ``replicas`` replicas), then Metadata of
    every node until each says partition 0 has the same leader and all ``replicas`` in its
    ISR (mpbroker's brokers learn a new topic's state each on its own, a moment apart):
    the leader's id."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    try:
        admin.create_topics([NewTopic(topic, 1, replicas)], operation_timeout=timeout)[topic].result(timeout)
    finally:
        del admin
    nodes = [(host, int(port)) for host, port in (address.rsplit(":", 1) for address in bootstrap.split(","))]
    deadline = time.monotonic() + timeout
    while True:
        seen = [partition_zero(host, port, topic) for host, port in nodes]
        leaders = {leader for leader, isr in seen}
        if len(leaders) == 1 and min(leaders) >= 0 and all(len(isr) == replicas for leader, isr in seen):
            return seen[0][0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: no leader with a full ISR of {replicas} on every node in {timeout} s: "
                               f"(leader, ISR) by node {seen}")
        time.sleep(0.02)


def partition_zero(host: str, port: int, topic: str) -> tuple:
    """``(leader, ISR)`` of ``topic``'s partition 0 in one node's Metadata (v1, which
    creates nothing), ``(-1, ())`` while the node does not know it or it has no leader."""
    message = MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    message.with_header(correlation_id=1, client_id="kafka-cluster-compare")
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(bytes(message.encode(version=1, header=True, framed=True)))
        (size,) = struct.unpack(">i", _receive(sock, 4))
        body = _receive(sock, size)
    answer = MetadataResponse.decode(body[4:], version=1)  # after the correlation id
    for found in answer.topics:
        if found.name == topic and found.error_code == 0:
            for partition in found.partitions:
                if partition.partition_index == 0 and partition.error_code == 0:
                    return partition.leader_id, tuple(partition.isr_nodes)
    return -1, ()


def _receive(sock, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"{sock.getpeername()} closed the connection")
        data += chunk
    return bytes(data)


def format_storage(cluster) -> None:
    """``kafka-storage format`` of every node of a Kafka cluster, side by side (a JVM each:
    seconds on a small machine); not part of the start-up time."""
    failures = []

    def format_node(node):
        try:
            node.format_storage()
        except BaseException as error:  # noqa: BLE001 - raised below, in the caller
            failures.append(error)

    threads = [threading.Thread(target=format_node, args=(node,)) for node in cluster.nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _processes(broker: str, cluster) -> dict:
    """``{name: pid}`` of every process of the cluster (mpbroker: by role; Kafka: each JVM)."""
    if broker == "kafka":
        return {f"node {node.node_id}": node.process.pid for node in cluster.nodes}
    return cluster.pids()


def _roots(cluster) -> list:
    return [process.pid for process in cluster.processes]


def _node(broker: str, name: str) -> int:
    """The node id in a process's name (``node 2``, ``b2 acceptor``)."""
    return int(name.split()[1]) if broker == "kafka" else int(name.split()[0][1:])


def _by_role(broker: str, spent: dict, leader: int) -> dict:
    """CPU by the part a process plays in the run, the same names whichever node leads:
    ``zookeeper``; ``leader <what>`` and ``followers <what>`` (the two summed), where
    ``<what>`` is ``JVM`` (Kafka) or the process's role (mpbroker: acceptor, worker (its
    workers summed), registrar, supervisor)."""
    roles = {}
    for name, seconds in spent.items():
        if name == "zookeeper":
            role = name
        else:
            part = "leader" if _node(broker, name) == leader else "followers"
            role = f"{part} {'JVM' if broker == 'kafka' else name.split()[1]}"
        roles[role] = roles.get(role, 0.0) + seconds
    return roles


class StartFailed(RuntimeError):
    """A cluster did not come up (every node answering, each listing all three)."""


def one_run(broker: str, args, run: int, message_bytes: int, linger_ms: int) -> dict:
    """Start a fresh cluster of ``broker``, take the section's figures, stop it."""
    scratch = tempfile.mkdtemp(prefix="rf3-", dir=args.dir)  # short: mpbroker's unix sockets live under it
    try:
        if broker == "kafka":
            cluster = kafka_cluster(scratch, NODES)
            format_storage(cluster)
            host, port = cluster.nodes[0].host, cluster.nodes[0].kafka_port
        else:
            cluster = mpbroker_cluster(scratch, NODES)
            host, port = cluster.host, cluster.kafka_port
        figures, cpu = {}, {}
        try:
            try:
                figures["rf3_startup_s"] = timed_start(cluster.start, host, port, brokers=NODES)
            except RuntimeError as error:
                raise StartFailed(str(error)) from error
            produce = {"size": message_bytes, "acks": -1, "conf": {"linger.ms": linger_ms}}
            if args.warmup:
                warmup = f"rf3-warmup-{run}"
                create_replicated_topic(cluster.bootstrap, warmup)
                rdkafka_perf.produce(args.program, cluster.bootstrap, warmup, args.warmup, **produce)
                rdkafka_perf.consume(args.program, cluster.bootstrap, warmup, args.warmup)
            topic = f"rf3-{run}"
            leader = create_replicated_topic(cluster.bootstrap, topic)
            processes = _processes(broker, cluster)
            before = {name: cpu_seconds(pid, if_gone=0.0) for name, pid in processes.items()}
            total_before = sum(tree_cpu_seconds(root) for root in _roots(cluster))
            result = rdkafka_perf.produce(args.program, cluster.bootstrap, topic, args.messages, **produce)
            total = sum(tree_cpu_seconds(root) for root in _roots(cluster)) - total_before
            spent = {name: cpu_seconds(pid, if_gone=0.0) - before[name] for name, pid in processes.items()}
            figures["rf3_produce_acksall"] = result["messages"] / result["seconds"]
            figures["cpu_rf3_produce_acksall"] = total / args.messages * 1e6
            cpu["rf3_produce_acksall"] = total
            cpu["by_process"] = {name: round(seconds, 3) for name, seconds in spent.items()}
            cpu["by_role"] = {name: round(seconds, 3) for name, seconds in _by_role(broker, spent, leader).items()}
            result = rdkafka_perf.consume(args.program, cluster.bootstrap, topic, args.messages)
            figures["rf3_consume"] = result["messages"] / result["seconds"]
        finally:
            cluster.__exit__(None, None, None)
        left = any(process is not None and process.poll() is None for process in cluster.processes)
        print(f"  {broker:8} cluster run {run + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items()),
              flush=True)
        return {"figures": figures, "cluster_cpu_s": cpu, "leader": leader, "process_left": left}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def interleaved(args, message_bytes: int, linger_ms: int) -> dict:
    """``args.runs`` runs of each cluster, taking turns: ``{broker: [run, ...]}``."""
    print(f"three nodes of each, settings on both: {fair(NODES)}", flush=True)
    runs = {broker: [] for broker in BROKERS}
    for run in range(args.runs):
        for broker in BROKERS:
            runs[broker].append(started_run(broker, args, run, message_bytes, linger_ms))
    return runs


def started_run(broker: str, args, run: int, message_bytes: int, linger_ms: int) -> dict:
    """``one_run``, with a fresh cluster once more if the first did not come up (a Kafka
    node of three once never registered with its quorum in 180 s, 1 start in about 20 here):
    a start that fails is not a figure of either broker, but a run lost would end the
    bench. The JSON says how many starts a run took."""
    try:
        return {**one_run(broker, args, run, message_bytes, linger_ms), "starts": 1}
    except StartFailed as error:
        print(f"  {broker:8} cluster run {run + 1}: the cluster did not start ({str(error)[:300]}); once more",
              flush=True)
        return {**one_run(broker, args, run, message_bytes, linger_ms), "starts": 2}


def cpu_note(runs: dict, messages: int) -> str:
    """Where each cluster's produce CPU went, by role (medians over the runs, per million
    messages): what to look at when mpbroker's cluster is the slower."""
    parts = []
    for broker in BROKERS:
        roles = sorted({role for run in runs[broker] for role in run["cluster_cpu_s"]["by_role"]})
        medians = {role: statistics.median(run["cluster_cpu_s"]["by_role"].get(role, 0.0)
                                           for run in runs[broker]) / messages * 1e6 for role in roles}
        parts.append(f"{broker}: " + ", ".join(f"{role} {seconds:.2f}" for role, seconds in medians.items()))
    return "Three nodes, RF 3, produce acks=all: cluster CPU seconds per million messages by role (medians; " \
        "followers: the two summed): " + "; ".join(parts) + "."
