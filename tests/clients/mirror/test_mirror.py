"""The mirror between real clusters on this machine: each cluster is a ZooKeeper of its
own (``zookeeper_factory``) and a broker registered in it. A topic is copied with its
partitioning, a topic created later is picked up, a SIGKILLed mirror restarted from
its committed offsets loses nothing (checked message by message, and by the audit
across the mirror), two sources feed one target; plus the pure placement rule."""

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from kazoo.client import KazooClient

from mpbroker.cli.audit import audit
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.clients.core.zk_registry import read_topic_partitions
from mpbroker.clients.groups.topic_filter import Whitelist
from mpbroker.clients.mirror.metrics import MirrorMetrics
from mpbroker.clients.mirror.mirror_maker import Mirror, MirrorConfig
from mpbroker.clients.mirror.placement import SourcePositions, position_of, position_partitioner
from mpbroker.registry import layout
from tests.clients.helpers import HOST, PARTITIONS, free_port, read_partition, wait_for

FAST_GROUP = {"rebalance.backoff.ms": 200, "rebalance.retries.max": 20, "zk.sessiontimeout.ms": 2000}


class Cluster:
    """A ZooKeeper of its own and one broker (id 1, 4 partitions per topic) registered in it."""

    def __init__(self, name: str, zookeeper_factory, broker_factory, **broker_properties):
        self.name = name
        self.zookeeper = zookeeper_factory(f"zk-{name}")
        self.zk_connect = self.zookeeper.connect_string(f"/{name}")
        self.broker = broker_factory(f"broker-{name}", enable_zookeeper="true", zk_connect=self.zk_connect,
                                     brokerid=1, **broker_properties)
        self._zk = None
        wait_for(lambda: self.zk.exists(layout.broker_path(1)), 15, 0.02, f"broker of {name} registered")

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(self.zk_connect)
            self._zk.start(10)
        return self._zk

    def producer(self, **settings) -> Producer:
        return Producer({"zk.connect": self.zk_connect, "acks": "append", **settings})

    def produce(self, topic: str, payloads, **settings) -> list:
        """Keyed by index (``xxhash(key) % 4`` spreads them), acknowledged. A topic the
        broker has not registered yet takes its first message at partition 0 (the
        producer's bootstrap); the rest wait until the producer sees every partition."""
        with self.producer(**settings) as producer:
            for index, payload in enumerate(payloads):
                producer.send(topic, payload, key=b"%d" % index)
                if index == 0:
                    wait_for(lambda: len(producer.partitions_for(topic)) == PARTITIONS, 15, 0.05,
                             f"the producer seeing every partition of {topic}")
        return list(payloads)

    def registered(self, topic: str) -> list:
        return read_topic_partitions(self.zk, topic)

    def read(self, topic: str, strip: bool = False) -> dict:
        """{partition: [payload, ...]} of everything fetchable now (``strip``: without audit envelopes)."""
        with SimpleConsumer(HOST, self.broker.port, audit_envelope=strip) as consumer:
            return {p: [payload for s in consumer.message_sets(topic, p, 0) for payload in s.payloads]
                    for p in range(PARTITIONS)}

    def read_all(self, topic: str, strip: bool = False) -> list:
        return [payload for payloads in self.read(topic, strip).values() for payload in payloads]

    def log_end_bytes(self, topic: str) -> int:
        with SimpleConsumer(HOST, self.broker.port) as consumer:
            return sum(consumer.latest_offset(topic, p) for p in range(PARTITIONS))

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()


def clusters(zookeeper_factory, broker_factory):
    """The body of a ``make_cluster`` fixture (also test_audit's): yields ``make(name)``."""
    made = []

    def make(name: str, **broker_properties) -> Cluster:
        cluster = Cluster(name, zookeeper_factory, broker_factory, **broker_properties)
        made.append(cluster)
        return cluster
    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def make_cluster(zookeeper_factory, broker_factory):
    yield from clusters(zookeeper_factory, broker_factory)


def mirror_config(sources, target, pattern: str, **overrides) -> MirrorConfig:
    return MirrorConfig(sources=[s.zk_connect for s in sources], target=target.zk_connect,
                        topic_filter=Whitelist(pattern), batch_size=200, linger_ms=20, report_interval_s=0.2,
                        consumer_properties=dict(FAST_GROUP), **overrides)


def payloads(prefix: str, count: int) -> list:
    return [b"%s-%07d-" % (prefix.encode(), i) + b"p" * 60 for i in range(count)]


def scrape(port: int) -> dict:
    """{(metric name, frozenset of label items): value} from a /metrics endpoint."""
    text = urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name, _, labels = name_labels.partition("{")
        items = frozenset(tuple(item.split("=", 1)) for item in labels.rstrip("}").split(",") if item)
        samples[(name, frozenset((k, v.strip('"')) for k, v in items))] = float(value)
    return samples


# --- the placement rule (pure) ----------------------------------------------------------

def test_placement_keeps_the_position_and_wraps_it_onto_other_counts():
    pairs = [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert [position_of(pairs, b, p) for b, p in pairs] == [0, 1, 2, 3, 4]
    assert position_of(pairs, 1, 5) == 2  # not registered (any more): where it would sort
    assert [position_partitioner(i, 5) for i in range(5)] == [0, 1, 2, 3, 4]  # same count: same position
    assert [position_partitioner(i, 2) for i in range(5)] == [0, 1, 0, 1, 0]  # fewer: one target per source
    calls = []

    def partitions(topic):
        calls.append(topic)
        return [layout.PartitionId(2, 0), layout.PartitionId(1, 3), layout.PartitionId(1, 0)]  # unsorted
    position = SourcePositions(partitions).lookup()
    assert [position("t", 1, 0), position("t", 1, 3), position("t", 2, 0), position("t", 1, 3)] == [0, 1, 2, 1]
    assert calls == ["t"]  # one lookup of the source's partitions per batch and topic


def test_a_mirror_refuses_to_copy_a_cluster_into_itself():
    with pytest.raises(ValueError, match="target"):
        MirrorConfig(sources=["127.0.0.1:1/a"], target="127.0.0.1:1/a", topic_filter=Whitelist("x")).check()
    with pytest.raises(ValueError, match="acks"):
        MirrorConfig(sources=["127.0.0.1:1/a"], target="127.0.0.1:1/b", topic_filter=Whitelist("x"),
                     acks="none").check()


# --- against two clusters ---------------------------------------------------------------

def test_the_mirror_copies_matching_topics_with_their_partitioning_and_picks_up_new_ones(make_cluster):
    source, target = make_cluster("a"), make_cluster("b")
    clicks = source.produce("clicks", payloads("clicks", 3000))
    source.produce("secret", payloads("secret", 50))
    metrics = MirrorMetrics()
    port = metrics.serve(0, HOST)
    mirror = Mirror(mirror_config([source], target, "clicks|logs-.*"), metrics).start()
    try:
        wait_for(lambda: len(target.read_all("clicks")) >= len(clicks), 30, 0.1, "clicks mirrored")
        # The same partition at the same position, in the same order (one broker, 4 partitions each side).
        assert target.read("clicks") == source.read("clicks")
        assert all(source.read("clicks").values())  # the keys spread over every partition

        later = source.produce("logs-web", payloads("logs", 500))  # a topic created while the mirror runs
        wait_for(lambda: len(target.read_all("logs-web")) >= len(later), 30, 0.1, "logs-web mirrored")
        assert target.read("logs-web") == source.read("logs-web")
        assert len(target.registered("logs-web")) == PARTITIONS

        assert target.registered("secret") == []  # not in the whitelist
        assert "secret" not in source.zk.get_children(f"/consumers/{mirror.config.group}/owners")

        def lags(samples):
            return [value for (name, _), value in samples.items() if name == "mpbroker_mirror_lag_bytes"]
        samples = wait_for(lambda: (s := scrape(port)) and len(lags(s)) == 2 * PARTITIONS and set(lags(s)) == {0}
                           and s, 10, 0.1, "a lag of 0 reported for the 8 partitions")
        source_label = ("source", source.zk_connect)
        assert samples[("mpbroker_mirror_messages_total", frozenset({source_label, ("topic", "clicks")}))] == 3000
        assert samples[("mpbroker_mirror_messages_total", frozenset({source_label, ("topic", "logs-web")}))] == 500
        assert samples[("mpbroker_mirror_bytes_total", frozenset({source_label, ("topic", "clicks")}))] == \
            sum(map(len, clicks))
        assert samples[("mpbroker_mirror_owned_partitions", frozenset({source_label}))] == 2 * PARTITIONS
    finally:
        assert mirror.stop()
        metrics.close()
    # Stopping committed the offsets of everything mirrored: the source's log ends.
    offsets = {}
    for topic in ("clicks", "logs-web"):
        path = layout.offsets_path(mirror.config.group, topic)
        for node in source.zk.get_children(path):
            offsets[(topic, node)] = int(source.zk.get(f"{path}/{node}")[0])
    with SimpleConsumer(HOST, source.broker.port) as consumer:
        assert offsets == {(topic, f"1-{p}"): consumer.latest_offset(topic, p)
                           for topic in ("clicks", "logs-web") for p in range(PARTITIONS)}


def test_a_mirror_killed_and_restarted_resumes_without_losing_a_message(make_cluster, tmp_path):
    source, target = make_cluster("a"), make_cluster("b")
    audited = {"audit.envelope": "true", "audit.window.ms": 1000, "producer.type": "async", "batch.size": 500,
               "queue.time": 50, "queue.enqueueTimeout.ms": -1}
    producer = source.producer(**audited)
    sent = payloads("order", 60000)
    for index, payload in enumerate(sent):
        producer.send("orders", payload, key=b"%d" % index)
    producer.flush()
    backlog_bytes = source.log_end_bytes("orders")

    metrics_port = free_port()

    def start_mirror(name: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "mpbroker.cli.mirror", "--source-zookeeper", source.zk_connect,
                   "--target-zookeeper", target.zk_connect, "--whitelist", "orders", "--batch-size", "200",
                   "--report-interval-s", "0.3", "--metrics-host", HOST, "--metrics-port", str(metrics_port)]
        command += [arg for key, value in FAST_GROUP.items() for arg in ("--consumer-property", f"{key}={value}")]
        with open(tmp_path / f"{name}.log", "w") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    first = start_mirror("first")
    try:
        wait_for(lambda: target.log_end_bytes("orders") >= backlog_bytes // 5, 60, 0.01, "a fifth mirrored")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert target.log_end_bytes("orders") < backlog_bytes, "the kill came too late to test anything"
        more = payloads("after-kill", 10000)  # produced while no mirror runs
        for index, payload in enumerate(more):
            producer.send("orders", payload, key=b"x%d" % index)
        producer.close()  # also publishes the audit counts of every window
        sent += more

        second = start_mirror("second")
        try:
            wait_for(lambda: set(target.read_all("orders", strip=True)) >= set(sent), 60, 0.3,
                     "every message at the target")
            mirrored = ("mpbroker_mirror_messages_total", frozenset({("source", source.zk_connect),
                                                                     ("topic", "orders")}))
            assert scrape(metrics_port)[mirrored] >= len(more)  # at least what came after the kill
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
    finally:
        if first.poll() is None:
            first.kill()
    received = target.read_all("orders", strip=True)
    assert set(received) == set(sent)  # everything, at least once; nothing else
    assert "msg/s" in (tmp_path / "second.log").read_text()  # the periodic log line

    # The audit across the mirror: the counts published at the source against what the
    # target received; the copies the restart made are duplicates, not discrepancies.
    wait_for(lambda: source.registered("_audit"), 15, 0.05, "the audit topic registered at the source")
    result = wait_for(lambda: (r := audit(target.zk_connect, ["orders"], 1000, sources=[source.zk_connect],
                                          grace_ms=0)) and all(w["status"] != "open"
                                                               for w in r["topics"][0]["windows"]) and r,
                      30, 0.2, "every audit window complete")
    windows = result["topics"][0]["windows"]
    assert result["problems"] == 0, json.dumps(result, indent=1)
    assert sum(w["produced"] for w in windows) == sum(w["received"] for w in windows) == len(sent)
    assert sum(w["duplicates"] for w in windows) == len(received) - len(sent)


def test_two_sources_mirror_into_one_target(make_cluster):
    east, west, central = make_cluster("east"), make_cluster("west"), make_cluster("central")
    from_east = east.produce("metrics", payloads("east", 800))
    from_west = west.produce("metrics", payloads("west", 600))
    with Mirror(mirror_config([east, west], central, "metrics")):
        wait_for(lambda: len(central.read_all("metrics")) >= len(from_east) + len(from_west), 30, 0.1,
                 "both sources mirrored")
        received = central.read("metrics")
    assert sorted(p for ps in received.values() for p in ps) == sorted(from_east + from_west)
    for partition, got in received.items():  # each source partition into the same position, in order
        assert [p for p in got if p.startswith(b"east")] == east.read("metrics")[partition]
        assert [p for p in got if p.startswith(b"west")] == west.read("metrics")[partition]


def test_a_message_the_target_refuses_for_good_is_dropped_and_counted_and_the_rest_goes_through(make_cluster):
    source, target = make_cluster("a"), make_cluster("b", max_message_size=1000)
    small = payloads("small", 300)
    sent = source.produce("mixed", small[:150] + [b"L" * 2000] + small[150:])
    metrics = MirrorMetrics()
    with Mirror(mirror_config([source], target, "mixed"), metrics):
        wait_for(lambda: metrics.total_dropped == 1 and set(target.read_all("mixed")) >= set(small), 30, 0.1,
                 "the small messages mirrored, the large one dropped")
    assert set(target.read_all("mixed")) == set(small)  # (the batch that held it may have gone twice)
    assert len(sent) == 301
    dropped = metrics.registry.get_sample_value("mpbroker_mirror_dropped_messages_total",
                                                {"source": source.zk_connect, "topic": "mixed"})
    assert dropped == 1 and metrics.total_messages == 300


def test_the_mirror_tool_refuses_bad_arguments(capsys):
    from mpbroker.cli.mirror import main
    assert main(["--source-zookeeper", "127.0.0.1:1/x", "--target-zookeeper", "127.0.0.1:1/x",
                 "--whitelist", "t"]) == 2
    assert "target" in capsys.readouterr().err
    assert main(["--source-zookeeper", "127.0.0.1:1/x", "--target-zookeeper", "127.0.0.1:1/y",
                 "--whitelist", "t", "--consumer-property", "novalue"]) == 2
    with pytest.raises(SystemExit):
        main(["--source-zookeeper", "127.0.0.1:1/x", "--target-zookeeper", "127.0.0.1:1/y"])  # no filter


# --- two brokers per cluster ----------------------------------------------------------------

TWO_BROKERS = {"num_partitions": 2, "num_workers": 1}


@contextlib.contextmanager
def zk_client(zk_connect: str):
    client = KazooClient(zk_connect)
    client.start(15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def two_broker_cluster(broker_factory, zk_connect: str, name: str) -> tuple:
    """Brokers 1 and 2 (2 partitions a topic, one worker each) registered under the chroot
    ``zk_connect``; returns (zk_connect, {broker id: broker})."""
    brokers = {b: broker_factory(f"{name}-{b}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=b,
                                 **TWO_BROKERS) for b in (1, 2)}
    with zk_client(zk_connect) as client:
        wait_for(lambda: all(client.exists(layout.broker_path(b)) for b in brokers), 15, 0.05,
                 f"both brokers of {name} registered")
    return zk_connect, brokers


def read_pairs(brokers: dict, topic: str) -> dict:
    """{(broker, partition): [payload, ...]} of every partition of every broker."""
    return {(b, p): read_partition(broker.port, topic, p) for b, broker in brokers.items() for p in range(2)}


def produce_spread(brokers: dict, topic: str, sent: list) -> dict:
    """Keyed, through a static broker list (it finds both brokers' two partitions by
    probing, so the keys spread over all four); returns read_pairs once every
    (broker, partition) holds some."""
    with Producer(broker_list=",".join(f"{b}:{HOST}:{broker.port}" for b, broker in brokers.items()),
                  acks="flush") as producer:
        producer.deliver([(topic, b"%d" % index, payload) for index, payload in enumerate(sent)])
    stored = read_pairs(brokers, topic)
    assert all(stored.values()), f"the source holds {topic} on every (broker, partition)"
    return stored


def wait_mirrored(target_brokers: dict, topic: str, sent: list) -> dict:
    """read_pairs of the target once all of ``sent`` arrived, each pair's copies made by
    a rebalance (at least once) left out."""
    wait_for(lambda: {p for got in read_pairs(target_brokers, topic).values() for p in got} >= set(sent), 30, 0.1,
             f"{topic} mirrored")
    on_target = {pair: list(dict.fromkeys(got)) for pair, got in read_pairs(target_brokers, topic).items()}
    assert {b for (b, _), got in on_target.items() if got} == {1, 2}, f"{topic} reaches both target brokers"
    return on_target


def test_with_two_brokers_a_side_each_source_partition_lands_on_the_same_broker_and_partition(
        broker_factory, zk_connect):
    """Issue 16: a new topic went to target broker 1 only (its partitions 0 and 1 took all
    four source partitions): the first message created it there, broker 1 alone
    registered it, and the list narrowed to its partitions. Also a topic created on the
    source while the mirror runs, which the source brokers register a moment apart."""
    source, source_brokers = two_broker_cluster(broker_factory, zk_connect + "/east", "east")
    target, target_brokers = two_broker_cluster(broker_factory, zk_connect + "/central", "central")
    views = payloads("views", 400)
    on_source = produce_spread(source_brokers, "page-views", views)
    with zk_client(source) as client:
        wait_for(lambda: {p.broker_id for p in read_topic_partitions(client, "page-views")} == {1, 2}, 15, 0.05,
                 "both source brokers registered page-views")

    config = MirrorConfig(sources=[source], target=target, topic_filter=Whitelist("page-.*"), batch_size=50,
                          linger_ms=20, report_interval_s=0.5, consumer_properties=dict(FAST_GROUP))
    with Mirror(config):
        assert wait_mirrored(target_brokers, "page-views", views) == on_source  # same pair, same order
        clicks = payloads("clicks", 400)
        on_source = produce_spread(source_brokers, "page-clicks", clicks)  # new while the mirror runs
        assert wait_mirrored(target_brokers, "page-clicks", clicks) == on_source


# --- no fault, no duplicate (issue 35, item 6) ------------------------------------------------

def produce_pairs(brokers: dict, topic: str, sent: list) -> None:
    """``sent`` spread evenly over every (broker, partition) of ``brokers`` (message i to
    pair i mod the pairs' count), through a static broker list, acknowledged on disk."""
    with Producer(broker_list=",".join(f"{b}:{HOST}:{broker.port}" for b, broker in brokers.items()),
                  acks="flush", partitioner_class=position_partitioner) as producer:
        producer.deliver([(topic, index, payload) for index, payload in enumerate(sent)])


def mirror_exactly_once(source_brokers: dict, target_brokers: dict, topic: str, sent: list,
                        metrics: MirrorMetrics) -> None:
    """Every message of ``sent`` on the target once, each source pair in the same target
    pair, in order; the mirror counted each once."""
    wait_for(lambda: sum(map(len, read_pairs(target_brokers, topic).values())) >= len(sent), 60, 0.1,
             f"{topic} mirrored")
    on_target = read_pairs(target_brokers, topic)
    got = sorted(p for got in on_target.values() for p in got)
    assert got == sorted(sent), f"{len(got)} messages on the target for {len(sent)}, {len(set(got))} distinct"
    assert on_target == read_pairs(source_brokers, topic)
    assert metrics.total_messages == len(sent)


def test_a_mirror_started_as_a_new_user_would_writes_each_message_once(broker_factory, zk_connect):
    """Issue 35, item 6: 500 messages in each of the 4 (broker, partition)s, the mirror
    started at once with its defaults, while the source brokers register the topic (each
    within a second of its first message, on its own). Its consumer owned nothing, then
    one broker's partitions, then all four, and what was in flight at each rebalance
    went twice (2,500 for 2,000)."""
    source, source_brokers = two_broker_cluster(broker_factory, zk_connect + "/east", "east")
    target, target_brokers = two_broker_cluster(broker_factory, zk_connect + "/central", "central")
    sent = payloads("mirr", 2000)
    produce_pairs(source_brokers, "mirr", sent)
    assert all(len(got) == 500 for got in read_pairs(source_brokers, "mirr").values())
    metrics = MirrorMetrics()
    with Mirror(MirrorConfig(sources=[source], target=target, topic_filter=Whitelist("mirr")), metrics):
        mirror_exactly_once(source_brokers, target_brokers, "mirr", sent, metrics)
        time.sleep(1.0)  # what a second copy would need to arrive
        mirror_exactly_once(source_brokers, target_brokers, "mirr", sent, metrics)


def test_a_rebalance_lets_the_batch_in_flight_reach_the_target_before_it_releases(broker_factory, zk_connect):
    """The mirror owns source broker 1's two partitions and holds a batch of them (waiting
    for broker 2 to register the topic, then spreading it on the target) when broker 2's
    registration rebalances its consumer. The rebalance committed the finished offsets
    (none yet) and fetched the batch again: 500 duplicates every run. It waits for the
    batch now."""
    source, source_brokers = two_broker_cluster(broker_factory, zk_connect + "/east", "east")
    target, target_brokers = two_broker_cluster(broker_factory, zk_connect + "/central", "central")
    first = payloads("first", 1000)
    produce_pairs({1: source_brokers[1]}, "mirr", first)
    with zk_client(source) as client:
        wait_for(lambda: {p.broker_id for p in read_topic_partitions(client, "mirr")} == {1}, 15, 0.05,
                 "source broker 1 registered mirr")
        metrics = MirrorMetrics()
        mirror = Mirror(MirrorConfig(sources=[source], target=target, topic_filter=Whitelist("mirr")), metrics)
        with mirror:
            connector = mirror._sources[0].connector
            wait_for(lambda: len(connector.owned_partitions().get("mirr", [])) == 2, 15, 0.02,
                     "broker 1's partitions owned")
            time.sleep(0.3)  # a batch taken: it waits for broker 2 (source_wait_s)
            assert metrics.total_messages == 0
            second = payloads("second", 1000)
            produce_pairs({2: source_brokers[2]}, "mirr", second)
            wait_for(lambda: len(connector.owned_partitions().get("mirr", [])) == 4, 15, 0.02,
                     "all four partitions owned")
            mirror_exactly_once(source_brokers, target_brokers, "mirr", first + second, metrics)
            time.sleep(1.0)
            mirror_exactly_once(source_brokers, target_brokers, "mirr", first + second, metrics)
