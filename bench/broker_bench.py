"""The paper's producer and consumer experiments against a real broker on this machine.

    python -m bench.broker_bench [--messages N] [--batch-1-messages N] [--workers W]

Producer: one producer, 200-byte messages, batches of 1 and of 50 messages per
request, fire-and-forget (0.7 PRODUCE) and acknowledged (PRODUCE_ACKED, durability
"append", a window of requests in flight). Time runs until the broker acknowledged
the last request (fire-and-forget runs end with one acknowledged request per
partition, which the worker answers only after everything before it was appended).
Consumer: one consumer reading everything back with ~200 KB fetches, every message
CRC-checked and decoded, one fetch in flight while the previous answer is decoded
(median of three runs). Ring: records per second through one shared-memory ring
between two processes, to show the hand-off's own cost.
"""

import argparse
import collections
import os
import select
import time

from bench.broker_process import BenchBroker
from bench.common import Connection, print_table, write_results
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.message import encode_message_set
from mpbroker.codec.message_set import decode_messages
from mpbroker.ipc.ring import Ring

MESSAGE_BYTES = 200
FETCH_BYTES = 200 * 1024
ACK_WINDOW = 64


def payloads(count: int) -> list:
    base = os.urandom(MESSAGE_BYTES)
    return [(b"%012d" % i) + base[12:] for i in range(count)]



def produce(port: int, topic: str, partitions: int, total: int, batch: int, acked: bool,
            window: int = ACK_WINDOW, first_partition: int = 0) -> float:
    """Send ``total`` messages to partitions ``first_partition`` .. ``+ partitions - 1`` in
    turn, acknowledged ones with up to ``window`` requests in flight; return seconds until
    the broker acknowledged the last."""
    conn = Connection(port)
    batch_payloads = payloads(batch)
    outstanding = 0
    started = time.perf_counter()
    for number in range(total // batch):
        message_set = encode_message_set(batch_payloads)
        partition = first_partition + number % partitions
        if acked:
            header, body = rq.produce_acked_parts(0, topic, partition, message_set)
            conn.sock.sendmsg([header, body])
            outstanding += 1
            if outstanding >= window:
                ack = rs.decode_produce_ack(conn.receive())
                assert ack.error == 0, ack
                outstanding -= 1
        else:
            header, body = rq.produce_parts(topic, partition, message_set)
            conn.sock.sendmsg([header, body])
    if not acked:  # one acknowledged request per partition: answered after everything before it
        for partition in range(first_partition, first_partition + partitions):
            conn.sock.sendall(rq.encode_produce_acked(0, topic, partition, encode_message_set([b"end"])))
        outstanding = partitions
    while outstanding:
        ack = rs.decode_produce_ack(conn.receive())
        assert ack.error == 0, ack
        outstanding -= 1
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def wait_flushed(broker: BenchBroker, topic: str) -> None:
    while True:
        rows = [p for p in broker.status()["partitions"] if p["topic"] == topic]
        if rows and all(p["flushed_end"] == p["log_end"] for p in rows):
            return
        time.sleep(0.05)


def consume(port: int, topic: str, partitions: int) -> tuple:
    """Read the topic back; return (messages, bytes, seconds).

    One connection; while a chunk of one partition is decoded, the fetch of another
    is already on its way (answers come back in request order), so the decode and
    the round trip overlap, as a consumer's fetcher does."""
    conn = Connection(port)
    messages = nbytes = 0
    started = time.perf_counter()
    ends, offsets = {}, {}
    for partition in range(partitions):
        conn.sock.sendall(rq.encode_offsets(topic, partition, -1, 1))
        _, (ends[partition],) = rs.decode_offsets(conn.receive())
        offsets[partition] = 0
    in_flight = collections.deque()
    for partition in range(partitions):
        if offsets[partition] < ends[partition]:
            conn.sock.sendall(rq.encode_fetch(topic, partition, offsets[partition], FETCH_BYTES))
            in_flight.append(partition)
    while in_flight:
        partition = in_flight.popleft()
        frame = conn.receive()
        assert frame[:2] == b"\x00\x00", frame[:2]
        offset = offsets[partition]
        found, _, consumed = decode_messages(frame[2:], offset)
        offsets[partition] = offset + (consumed or len(frame) - 2)
        if offsets[partition] < ends[partition]:
            conn.sock.sendall(rq.encode_fetch(topic, partition, offsets[partition], FETCH_BYTES))
            in_flight.append(partition)
        messages += len(found)
        nbytes += consumed
    elapsed = time.perf_counter() - started
    conn.close()
    return messages, nbytes, elapsed


def ring_cost(records: int = 500_000, per_publish: int = 50) -> float:
    """Records per second through one ring between two processes (200-byte bodies)."""
    ring = Ring(8 << 20)
    body = b"x" * MESSAGE_BYTES
    pid = os.fork()
    if pid == 0:
        ring.attach_writer()
        written = 0
        while written < records:
            if ring.try_write(1, body):
                written += 1
                if written % per_publish == 0:
                    ring.publish()
            else:
                ring.publish()
                select.select([ring.space_fd], [], [], 0.01)
                Ring.clear_notification(ring.space_fd)
        ring.publish()
        os._exit(0)
    ring.attach_reader()
    received = 0
    started = time.perf_counter()
    while received < records:
        select.select([ring.data_fd], [], [], 1.0)
        Ring.clear_notification(ring.data_fd)
        received += len(ring.read())
        ring.release()
    elapsed = time.perf_counter() - started
    os.waitpid(pid, 0)
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per batch-50 run (default 1M)")
    parser.add_argument("--batch-1-messages", type=int, default=200_000, help="messages per batch-1 run")
    parser.add_argument("--workers", type=int, default=2, help="num.workers of the broker (default 2)")
    parser.add_argument("--dir", default=None, help="where the broker's log.dir goes")
    args = parser.parse_args()
    partitions = args.workers
    rows, data = [], {"producer": [], "consumer": {}, "ring": {}}
    with BenchBroker(args.dir, num_workers=args.workers, num_partitions=partitions) as broker:
        for batch, count in ((1, args.batch_1_messages), (50, args.messages)):
            for acked in (False, True):
                topic = f"bench-b{batch}-{'ack' if acked else 'ff'}"
                seconds = produce(broker.port, topic, partitions, count, batch, acked)
                rate = count / seconds
                mode = "acknowledged (append)" if acked else "fire-and-forget"
                rows.append([f"produce batch {batch}, {mode}", f"{rate:,.0f}",
                             f"{rate * MESSAGE_BYTES / 1e6:,.1f}"])
                data["producer"].append({"batch": batch, "acked": acked, "messages": count,
                                         "seconds": seconds, "messages_per_s": rate})
        topic = "bench-b50-ff"
        wait_flushed(broker, topic)
        runs = sorted((consume(broker.port, topic, partitions) for _ in range(3)), key=lambda r: r[0] / r[2])
        messages, nbytes, seconds = runs[1]  # the median of three runs
        rate = messages / seconds
        rows.append([f"consume, {FETCH_BYTES // 1024} KB fetches, CRC-checked", f"{rate:,.0f}",
                     f"{nbytes / seconds / 1e6:,.1f}"])
        data["consumer"] = {"messages": messages, "seconds": seconds, "messages_per_s": rate,
                            "mb_per_s": nbytes / seconds / 1e6}
        data["disk_bytes_per_message"] = broker.disk_bytes() / max(1, sum(
            p["messages_in"] for p in broker.status()["partitions"]))
    ring_rate = ring_cost()
    rows.append(["ring hand-off, 200 B records, 50 per publish", f"{ring_rate:,.0f}",
                 f"{ring_rate * MESSAGE_BYTES / 1e6:,.1f}"])
    data["ring"] = {"records_per_s": ring_rate, "us_per_record": 1e6 / ring_rate}
    table = print_table(f"mpbroker on this machine ({args.workers} workers, 200-byte messages)",
                        ["experiment", "messages/s", "MB/s"], rows)
    note = (f"\nring: {1e6 / ring_rate:.2f} us per record; disk: "
            f"{data['disk_bytes_per_message']:.1f} bytes per 200-byte message")
    print(note)
    write_results("broker", table + "\n" + note, data)


if __name__ == "__main__":
    main()
