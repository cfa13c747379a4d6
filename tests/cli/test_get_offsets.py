"""mpbroker-get-offsets (GetOffsetShell's job) as a subprocess against real brokers:
the log end and start, segment bases before a time, several brokers, and its errors."""

import glob
import os
import subprocess
import sys
import time

import pytest

from mpbroker.clients import Producer
from tests.clients.helpers import HOST, PARTITIONS, broker_list, free_port, set_bytes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get_offsets(*args):
    return subprocess.run([sys.executable, "-m", "mpbroker.cli.get_offsets", *args], capture_output=True, timeout=30,
                          cwd=REPO)


def produce_to(brokers: str, topic: str, partition: int, payloads):
    with Producer(broker_list=brokers, acks="flush", partitioner_class=lambda key, n: partition) as producer:
        producer.send(topic, payloads)


def test_latest_earliest_and_segment_bases_before_a_time(broker_factory):
    broker = broker_factory(log_file_size=300)
    message = [b"x" * 43, b"y" * 43]  # 106-byte sets, 2 per segment
    for _ in range(6):
        produce_to(broker_list(broker), "offs", 1, message)
    files = sorted(glob.glob(os.path.join(broker.log_dir, "offs-1", "*.kafka")))
    bases = [int(os.path.basename(f)[:20]) for f in files]
    end = 6 * set_bytes(message)
    assert len(bases) == 3

    latest = get_offsets("--broker-list", broker_list(broker), "--topic", "offs")
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout.decode().splitlines() == [f"offs:{p}:{end if p == 1 else 0}" for p in range(PARTITIONS)]
    earliest = get_offsets("--bootstrap-server", broker_list(broker), "--topic", "offs", "--partition", "1",
                           "--time", "-2")
    assert earliest.stdout == b"offs:1:0\n"

    now = time.time()
    for age, path in enumerate(reversed(files[:-1]), 1):  # closed segments last written 1 h and 2 h ago
        os.utime(path, (now - age * 3600, now - age * 3600))
    future = str(int((now + 3600) * 1000))
    every = get_offsets("--broker-list", broker_list(broker), "--topic", "offs", "--partition", "1", "--time", future,
                        "--max-offsets", "100")
    assert every.stdout.decode() == f"offs:1:{','.join(map(str, [end] + bases[::-1]))}\n"
    half_an_hour_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 1800))
    between = get_offsets("--broker-list", broker_list(broker), "--topic", "offs", "--partition", "1",
                          "--time", half_an_hour_ago, "--max-offsets", "5")
    assert between.stdout.decode() == f"offs:1:{bases[1]},{bases[0]}\n"
    before_all = get_offsets("--broker-list", broker_list(broker), "--topic", "offs", "--partition", "1",
                             "--time", str(int((now - 3 * 3600) * 1000)))
    assert (before_all.returncode, before_all.stdout) == (0, b"offs:1:\n")


def test_several_brokers_are_labelled_broker_and_partition(broker_factory):
    first, second = broker_factory("one"), broker_factory("two")
    produce_to(broker_list(first), "both", 2, [b"a"])
    produce_to(broker_list(second), "both", 0, [b"b", b"c"])
    both = f"0:{HOST}:{first.port},1:{HOST}:{second.port}"
    result = get_offsets("--broker-list", both, "--topic", "both", "--partition", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["both:0-0:0", f"both:1-0:{set_bytes([b'b', b'c'])}"]


def test_unknown_topic_and_partition_exit_2(broker):
    produce_to(broker_list(broker), "present", 0, [b"x"])
    unknown = get_offsets("--broker-list", broker_list(broker), "--topic", "absent")
    assert unknown.returncode == 2 and unknown.stdout == b""
    assert unknown.stderr == (f"mpbroker-get-offsets: unknown topic 'absent': no partition has a log on "
                              f"{HOST}:{broker.port}\n").encode()
    partition = get_offsets("--broker-list", broker_list(broker), "--topic", "present", "--partition", "9")
    assert partition.returncode == 2
    assert b"partition 9 of topic 'present' does not exist" in partition.stderr


@pytest.mark.parametrize("args", [["--time", "yesterday"], ["--time", "-3"], ["--max-offsets", "0"],
                                  ["--partition", "-1"], ["--topic", "../x"]],
                         ids=["bad-time", "negative-time", "no-offsets", "negative-partition", "bad-topic"])
def test_bad_arguments_exit_2(args):
    result = get_offsets("--broker-list", f"{HOST}:1", "--topic", "t", *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == b""


def test_unreachable_broker_exits_3():
    target = f"{HOST}:{free_port()}"
    result = get_offsets("--broker-list", target, "--topic", "t")
    assert result.returncode == 3
    assert target.encode() in result.stderr and len(result.stderr.splitlines()) == 1
