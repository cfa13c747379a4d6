"""Topics and offsets through ZooKeeper against a real ZooKeeper and a real broker:
``mpbroker-console-consumer --zookeeper`` on an unknown topic (an error with the
registered topics that look like it, or ``--wait-for-topic``), ``--print-offset``'s
two offsets, and the consumer connector's stream on a damaged message (the messages
before it delivered, its partition stopped, the other partitions going on)."""

import logging
import os
import subprocess
import sys
import threading

import pytest

from mpbroker.clients.core.zk_registry import read_topics
from mpbroker.clients.groups.connector import ConsumerConnector
from mpbroker.clients.producer.producer import Producer
from mpbroker.codec.message import V1_OVERHEAD
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import HOST, set_bytes, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = {"rebalance_backoff_ms": 200, "rebalance_retries_max": 20, "autocommit_interval_ms": 200,
        "zk_sessiontimeout_ms": 4000}


@pytest.fixture
def registered(broker_factory, zk_connect):
    """One broker (id 1) registered in a fresh chroot; ``produce(topic, partition, payloads)``
    sends with flush acknowledgements and waits until ZooKeeper lists the topic."""
    broker = broker_factory("zk", enable_zookeeper="true", zk_connect=zk_connect, brokerid=1)
    client = start_client(zk_connect, 10000, 10000)

    def produce(topic, partition, payloads):
        with Producer(broker_list=f"1:{HOST}:{broker.port}", acks="flush",
                      partitioner_class=lambda key, n: partition) as producer:
            producer.send(topic, payloads)
        wait_for(lambda: topic in read_topics(client), 15, what=f"{topic} registered")

    broker.produce = produce
    yield broker
    close_client(client)


def console_consumer(zk_connect, *args):
    return [sys.executable, "-m", "mpbroker.cli.console_consumer", "--zookeeper", zk_connect, *args]


def test_an_unknown_topic_is_an_error_with_the_topics_that_look_like_it(registered, zk_connect):
    registered.produce("page-views", 0, [b"v"])
    registered.produce("audit-log", 0, [b"c"])
    typo = subprocess.run(console_consumer(zk_connect, "--topic", "page-veiws", "--timeout-ms", "5000"),
                          capture_output=True, timeout=30, cwd=REPO)
    assert typo.returncode == 2
    assert typo.stderr == (f"mpbroker-console-consumer: unknown topic 'page-veiws' (did you mean 'page-views'?): "
                           f"no broker registered it at {zk_connect}; --wait-for-topic waits for it\n").encode()
    unlike = subprocess.run(console_consumer(zk_connect, "--topic", "orders", "--group", "g"),
                            capture_output=True, timeout=30, cwd=REPO)
    assert unlike.returncode == 2
    assert unlike.stderr == (f"mpbroker-console-consumer: unknown topic 'orders': no broker registered it at "
                             f"{zk_connect}; --wait-for-topic waits for it\n").encode()


def test_wait_for_topic_prints_what_arrives_with_both_offsets(registered, zk_connect):
    process = subprocess.Popen(console_consumer(zk_connect, "--topic", "later", "--wait-for-topic",
                                                "--from-beginning", "--max-messages", "2", "--print-offset",
                                                "--timeout-ms", "20000"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        registered.produce("later", 1, [b"first", b"second"])
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    first = set_bytes([b"first"])
    assert out.splitlines() == [b"offset=0 next_offset=%d\tfirst" % first,
                                b"offset=%d next_offset=%d\tsecond" % (first, first + set_bytes([b"second"]))]


def test_a_damaged_message_stops_its_partition_after_the_messages_before_it(registered, zk_connect, caplog):
    payloads = [b"good-%d" % i for i in range(3)] + [b"damaged", b"after"]
    registered.produce("hurt", 2, payloads)
    registered.produce("hurt", 0, [b"other-0"])
    bad = set_bytes(payloads[:3])
    with open(os.path.join(registered.log_dir, "hurt-2", "%020d.kafka" % 0), "r+b") as segment:
        segment.seek(bad + V1_OVERHEAD + 1)
        segment.write(b"X")
    connector = ConsumerConnector(zk_connect=zk_connect, groupid="hurt-readers", consumer_timeout_ms=3000,
                                  autooffset_reset="smallest", **FAST)
    got = []
    try:
        with caplog.at_level(logging.ERROR, logger="mpbroker.clients.groups.fetcher"):
            (stream,) = connector.create_message_streams({"hurt": 1})["hurt"]
            reader = threading.Thread(target=lambda: got.extend(message for message in _until_quiet(stream)))
            reader.start()
            wait_for(lambda: len(got) >= 4, 15, what="the messages before the damaged one and partition 0's")
            registered.produce("hurt", 0, [b"other-1"])  # partition 0 goes on
            wait_for(lambda: len(got) >= 5, 15, what="a later message of another partition")
            reader.join(20)
    finally:
        connector.shutdown()
    by_partition = {}
    for message in got:
        by_partition.setdefault(message.partition, []).append(message)
    assert [m.payload for m in by_partition[2]] == payloads[:3]
    assert [m.offset for m in by_partition[2]] == [0, set_bytes(payloads[:1]), set_bytes(payloads[:2])]
    assert [m.payload for m in by_partition[0]] == [b"other-0", b"other-1"]
    errors = [r.getMessage() for r in caplog.records if "fails its CRC check" in r.getMessage()]
    assert len(errors) == 1, errors
    assert f"message at offset {bad} of hurt-2 fails its CRC check" in errors[0]


def _until_quiet(stream):
    from mpbroker.clients.groups.message_stream import ConsumerTimeoutError
    try:
        yield from stream
    except ConsumerTimeoutError:
        return


def test_the_console_consumer_prints_up_to_a_damaged_message_then_exits_1_naming_it(registered, zk_connect):
    payloads = [b"good-%d" % i for i in range(3)] + [b"damaged", b"after"]
    registered.produce("hurt", 2, payloads)
    bad = set_bytes(payloads[:3])
    with open(os.path.join(registered.log_dir, "hurt-2", "%020d.kafka" % 0), "r+b") as segment:
        segment.seek(bad + V1_OVERHEAD + 1)
        segment.write(b"X")
    run = subprocess.run(console_consumer(zk_connect, "--topic", "hurt", "--from-beginning", "--timeout-ms", "3000"),
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.stdout.splitlines() == ["good-0", "good-1", "good-2"], run.stdout + run.stderr
    assert run.returncode == 1, run.stderr  # not 0: the partition was not read to its end
    assert f"hurt-1-2 stopped at offset {bad}: " in run.stderr and "fails its CRC check" in run.stderr, run.stderr
