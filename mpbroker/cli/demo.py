"""``mpbroker-demo``: a standalone broker, a producer and a consumer, end to end.

Starts ``mpbroker serve`` (no ZooKeeper) on a free port with a temporary ``log.dir``,
produces keyed messages (plain, gzip- and snappy-compressed) to a two-partition topic
with the Producer (acknowledged once flushed), reads both partitions back with the
SimpleConsumer (which decompresses), prints the broker's ``mpbroker-ctl status`` and stops the broker
gracefully.
"""

import argparse
import shutil
import tempfile

from mpbroker.cli.ctl import format_status
from mpbroker.clients import Producer, SimpleConsumer
from mpbroker.testing.local_broker import LocalBroker

TOPIC = "page-views"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory afterwards")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="mpbroker-demo-")
    broker = LocalBroker(directory, num_partitions=2, num_workers=2)
    try:
        broker.start()
    except RuntimeError as exc:
        raise SystemExit(f"the broker did not start: {exc}") from None
    port = broker.port
    print(f"broker running on 127.0.0.1:{port} (pid {broker.process.pid}), log.dir {broker.log_dir}\n")
    try:
        broker_list = f"127.0.0.1:{port}"
        with Producer(broker_list=broker_list, acks="flush") as producer:
            for key, pages in ((b"alice", [b"/home", b"/about", b"/pricing"]), (b"bob", [b"/docs", b"/blog"])):
                for result in producer.send(TOPIC, pages, key=key):
                    print(f"produced {result.messages} messages for {key.decode()} to {TOPIC}-{result.partition}: "
                          f"written at offset {result.offset}, flushed to disk")
        for codec, key, pages in (("gzip", b"carol", [b"/jobs", b"/team"]), ("snappy", b"dave", [b"/faq", b"/"])):
            with Producer(broker_list=broker_list, acks="flush", compression_codec=codec) as producer:
                result, = producer.send(TOPIC, pages, key=key)
                print(f"produced a {codec}-compressed set of {result.messages} messages for {key.decode()} "
                      f"to {TOPIC}-{result.partition} at offset {result.offset}")
        print()
        with SimpleConsumer("127.0.0.1", port) as consumer:
            for partition in range(2):
                for message in consumer.messages(TOPIC, partition, 0):
                    print(f"consumed {TOPIC}-{partition}: {message.payload.decode():10s} "
                          f"next offset {message.next_offset}")
        print("(a message inside a compressed set reports the set's start as its next offset, the last one the\n"
              " set's end: Kafka 0.7's rule, so a committed offset never points inside a set)\n")
        print(format_status(broker.status()))
    finally:
        code = broker.stop()
        broker.close()
        print(f"\nbroker stopped gracefully (exit code {code})")
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
