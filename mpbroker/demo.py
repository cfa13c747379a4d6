"""``mpbroker-demo``: a standalone broker, a producer and a consumer, end to end.

Starts ``mpbroker serve`` (no ZooKeeper) on a free port with a temporary ``log.dir``,
produces plain, gzip and snappy message sets to two partitions of a topic with
acknowledged produce requests, reads them back with fetch requests, prints what a
consumer sees and the broker's ``mpbroker-ctl status``, and stops the broker
gracefully.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from mpbroker.ctl import NotRunning, call, format_status
from mpbroker.protocol import requests as rq
from mpbroker.protocol import responses as rs
from mpbroker.protocol.framing import FrameReader
from mpbroker.segments.compression import compress
from mpbroker.segments.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from mpbroker.segments.message_set import decode_messages

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


class Client:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = FrameReader(1 << 30)

    def request(self, data: bytes) -> bytes:
        self.sock.sendall(data)
        while (frame := self.reader.next_frame()) is None:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            self.reader.feed(chunk)
        return frame


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory afterwards")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="mpbroker-demo-")
    broker, socket_path, port = start_broker(directory)
    print(f"broker running on 127.0.0.1:{port} (pid {broker.pid}), log.dir {directory}/logs\n")
    try:
        client = Client(port)
        batches = [
            (0, "plain", encode_message_set([b"/home", b"/about", b"/pricing"])),
            (1, "gzip", encode_message(compress(CODEC_GZIP, encode_message_set([b"/docs", b"/blog"])), CODEC_GZIP)),
            (1, "snappy", encode_message(compress(CODEC_SNAPPY, encode_message_set([b"/jobs"])), CODEC_SNAPPY)),
        ]
        for partition, name, message_set in batches:
            ack = rs.decode_produce_ack(client.request(rq.encode_produce_acked(1, TOPIC, partition, message_set)))
            print(f"produced a {name} set to {TOPIC}-{partition}: written at offset {ack.offset}, "
                  f"flushed to disk (error {ack.error})")
        print()
        for partition in (0, 1):
            _, (end,) = rs.decode_offsets(client.request(rq.encode_offsets(TOPIC, partition, -1, 1)))
            error, data = rs.split_error(client.request(rq.encode_fetch(TOPIC, partition, 0, 1 << 20)))
            payloads, offsets, _ = decode_messages(bytes(data), 0)
            for payload, offset in zip(payloads, offsets):
                print(f"consumed {TOPIC}-{partition}: {payload.decode():10s} next offset {offset}")
            print(f"  (log end {end}, fetch error {error})")
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
