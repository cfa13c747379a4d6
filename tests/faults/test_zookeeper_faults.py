"""ZooKeeper faults the registry tests do not cover: a ZooKeeper that comes back with its
data wiped (a new ensemble, a lost disk). Its server refuses a client that has seen a
newer transaction id than its own, so a client that only reconnects would stay away for
ever. Guarantee checked: the broker registers again (id, topics, the chroot recreated)
and a ZooKeeper-configured producer sends to it again, without a restart."""

import shutil
import time

from kazoo.client import KazooClient

from mpbroker.clients.consumer.simple_consumer import SimpleConsumer
from mpbroker.clients.producer.producer import Producer
from tests.broker.harness import BrokerProcess
from tests.polling import wait_for


def registered(zk_connect: str, broker_id: int, topic: str):
    client = KazooClient(hosts=zk_connect, timeout=5)
    try:
        client.start(5)
        return client.exists(f"/brokers/ids/{broker_id}") and client.exists(f"/brokers/topics/{topic}/{broker_id}")
    except Exception:
        return False
    finally:
        client.stop()
        client.close()


def wipe_and_restart(server) -> None:
    server.kill()
    shutil.rmtree(server.data_dir)
    server.start()


def test_broker_and_producer_come_back_after_zookeeper_lost_its_data(zookeeper_factory, tmp_path):
    server = zookeeper_factory()
    zk_connect = server.connect_string("/wiped")
    broker = BrokerProcess(tmp_path / "b", enable_zookeeper="true", zk_connect=zk_connect, brokerid=3,
                           num_partitions=2, zk_sessiontimeout_ms=2000, zk_connectiontimeout_ms=2000)
    producer = None
    try:
        broker.start()
        producer = Producer({"zk.connect": zk_connect, "zk.sessiontimeout.ms": 2000, "acks": "append"})
        # Many transactions, then one more by the broker: its client has seen a zxid far
        # beyond what the wiped server will reach soon (the case the server refuses).
        writer = KazooClient(hosts=zk_connect, timeout=5)
        writer.start(5)
        for number in range(300):
            writer.create(f"/filler-{number}", b"x", makepath=True)
        writer.stop()
        writer.close()
        producer.send("before", [b"one"])
        wait_for(lambda: registered(zk_connect, 3, "before"), 10, "the first registration", broker.output)

        wipe_and_restart(server)
        assert not registered(server.hosts, 3, "before")  # nothing left, not even the chroot

        # Watch the broker's own report, not ZooKeeper: every session a poller opened would be
        # a transaction moving the server's zxid towards the client's, which would hide the fault.
        started = time.monotonic()
        wait_for(lambda: (broker.status()["zookeeper"] or {}).get("registered"), 30,
                 "the registration after the wipe", broker.output)
        recovered_in = time.monotonic() - started
        assert registered(zk_connect, 3, "before")
        assert "starting a new session" in broker.output()

        # The producer's view comes back too: a topic it has not used yet is sent to the broker.
        wait_for(lambda: _sends(producer, "after"), 30, "the producer sending again")
        with SimpleConsumer("127.0.0.1", broker.port) as consumer:  # appended, then flushed within 20 ms
            wait_for(lambda: b"after" in [payload for p in range(2) for payload in consumer.fetch("after", p, 0).payloads],
                     5, "the message sent after the wipe")
        print(f"registered again {recovered_in:.1f}s after ZooKeeper came back empty")
    finally:
        if producer is not None:
            producer.close()
        broker.close()


def _sends(producer, topic: str) -> bool:
    try:
        producer.send(topic, [topic.encode()])
        return True
    except Exception:
        return False
