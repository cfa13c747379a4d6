"""``mpbroker-demo``: a standalone broker, a producer and a consumer, end to end.

Starts ``mpbroker serve`` (no ZooKeeper) on a free port with a temporary ``log.dir``,
produces keyed messages (plain and snappy-compressed) to a two-partition topic with
the Producer (acknowledged once flushed), reads both partitions back with the
SimpleConsumer, prints the broker's ``mpbroker-ctl status`` and stops the broker
gracefully.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from clients import Producer, SimpleConsumer
from mpbroker.ctl import NotRunning, call, format_status

TOPIC = "page-views"


def start_broker(directory: str) -> tuple:
    config = os.path.join(directory, "server.properties")
    log_dir = os.path.join(directory, "logs")
    with open(config, "w") as f:
        f.write(f"port=0\nhostname=127.0.0.1\nlog.dir={log_dir}\nnum.partitions=2\nnum.workers=2\n")
    broker = subprocess.Popen([sys.executable, "-m", "mpbroker.cli", "serve", config],
                              stderr=open(os.path.join(directory, "broker.log"), "w"))
    socket_path = os.path.join(log_dir, "mpbroker.sock")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status = call(socket_path, "status", timeout=2)
            if status["acceptor"]["state"] == "up":
                return broker, socket_path, status["port"]
        except (NotRunning, OSError, ValueError):
            pass
        if broker.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"the broker did not start; see {directory}/broker.log")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory afterwards")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="mpbroker-demo-")
    broker, socket_path, port = start_broker(directory)
    print(f"broker running on 127.0.0.1:{port} (pid {broker.pid}), log.dir {directory}/logs\n")
    try:
        broker_list = f"127.0.0.1:{port}"
        with Producer(broker_list=broker_list, acks="flush") as producer:
            for key, pages in ((b"alice", [b"/home", b"/about", b"/pricing"]), (b"bob", [b"/docs", b"/blog"])):
                for result in producer.send(TOPIC, pages, key=key):
                    print(f"produced {result.messages} messages for {key.decode()} to {TOPIC}-{result.partition}: "
                          f"written at offset {result.offset}, flushed to disk")
        with Producer(broker_list=broker_list, acks="flush", compression_codec="snappy") as producer:
            result, = producer.send(TOPIC, [b"/jobs", b"/team"], key=b"carol")
            print(f"produced a snappy-compressed set to {TOPIC}-{result.partition} at offset {result.offset}")
        print()
        with SimpleConsumer("127.0.0.1", port) as consumer:
            for partition in range(2):
                for message in consumer.messages(TOPIC, partition, 0):
                    print(f"consumed {TOPIC}-{partition}: {message.payload.decode():10s} "
                          f"next offset {message.next_offset}")
        print()
        print(format_status(call(socket_path, "status")))
    finally:
        broker.send_signal(signal.SIGTERM)
        code = broker.wait(60)
        print(f"\nbroker stopped gracefully (exit code {code})")
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
