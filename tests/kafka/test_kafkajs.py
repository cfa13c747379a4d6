"""kafkajs 2.2.4 (Node) against the modern listener: its producer (acks all and 1, no
compression and gzip: kafkajs ships no other codec) and its admin client (topic
metadata, offsets), run by ``kafkajs_roundtrip.js``; what it wrote is read back with
confluent-kafka; and its consumer, which cannot work without a group (it starts with
FindCoordinator), reads them back in one.

tests/run.sh installs kafkajs into ``$HOME/.cache/mpbroker-test-node`` (outside the
repository); ``MPBROKER_NODE_MODULES`` names another node_modules directory."""

import json
import os
import shutil
import subprocess
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafkajs_roundtrip.js")
NODE_MODULES = os.environ.get("MPBROKER_NODE_MODULES") or os.path.join(
    os.path.expanduser("~"), ".cache", "mpbroker-test-node", "node_modules")


def run_script(broker, topic, mode):
    node = shutil.which("node")
    assert node, "node is missing"
    assert os.path.isdir(os.path.join(NODE_MODULES, "kafkajs")), (
        f"kafkajs is missing from {NODE_MODULES} (tests/run.sh installs it)")
    run = subprocess.run([node, SCRIPT, broker.bootstrap, topic, mode], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MPBROKER_NODE_MODULES": NODE_MODULES})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def read_back(broker, topic, count):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
        return got
    finally:
        consumer.close()


def test_kafkajs_producer_and_admin(kafka_broker, topic):
    result = run_script(kafka_broker, topic, "produce")
    sent = result["sent"]
    assert [a["errorCode"] for a in result["answers"]] == [0, 0]
    [meta] = result["metadata"]["topics"]
    assert meta["name"] == topic
    assert [(p["partitionId"], p["leader"], p["partitionErrorCode"]) for p in meta["partitions"]] == [
        (0, 0, 0), (1, 0, 0)]
    got = read_back(kafka_broker, topic, len(sent))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()) for m in got] == [
        (s["key"].encode(), s["value"].encode(), [(k, v.encode()) for k, v in s["headers"].items()],
         (1, s["timestamp"])) for s in sent]
    bases = [int(a["baseOffset"]) for a in result["answers"]]
    assert [m.offset() for m in got] == [bases[0] + i for i in range(3)] + [bases[1] + i for i in range(3)]
    offsets = {o["partition"]: o for o in result["offsets"]}
    assert int(offsets[0]["high"]) == got[-1].offset() + 1 and int(offsets[0]["low"]) <= got[0].offset()
    assert int(offsets[1]["high"]) == int(offsets[1]["low"]) == 0


def test_kafkajs_consumer(kafka_broker, topic):
    run_script(kafka_broker, topic, "produce")
    result = run_script(kafka_broker, topic, "consume")
    assert result.get("messages") == [f"value-{i}" for i in range(6)], result
