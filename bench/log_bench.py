"""Partition-log benchmark: append and read throughput next to plain file I/O of the
same bytes in the same run, and message-set validation speed.

    python -m bench.log_bench [--megabytes N] [--repeats R] [--dir PATH]

Append writes N MB of pre-built, pre-validated message sets through ``Log.append``
(200-byte and 10 KB messages, in sets of 50 messages and of ~1 MB) and compares with
``os.write`` of the very same buffers to a plain file. Read fetches the log back in
1 MB ``Log.read`` regions (``os.pread``) against plain ``os.pread``. Validation
counts 200-byte messages per second on one core.
"""

import argparse
import os
import shutil
import tempfile

from bench.common import best_of, print_table, write_results
from mpbroker.codec.message import encode_message_set
from mpbroker.codec.message_set import validate_message_set
from mpbroker.segments import LogConfig, LogManager

MB = 1 << 20


def build_sets(message_size: int, messages_per_set: int, total_bytes: int) -> list:
    payloads = [os.urandom(message_size) for _ in range(messages_per_set)]
    one = encode_message_set(payloads)
    return [one] * max(1, total_bytes // len(one))


def messages_per_mb_set(message_size: int) -> int:
    return max(1, MB // (message_size + 10))


def plain_write(directory: str, sets: list) -> None:
    path = os.path.join(directory, "plain.dat")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        for buffer in sets:
            os.write(fd, buffer)
    finally:
        os.close(fd)
    os.unlink(path)


def log_append(directory: str, sets: list, messages: int) -> None:
    manager = LogManager(directory, lambda topic: LogConfig(segment_bytes=1 << 30))
    log = manager.get_or_create("bench", 0)
    for buffer in sets:
        log.append(buffer, messages)
    for segment in log._segments:
        segment.close()
    shutil.rmtree(log.directory)


def run(args) -> None:
    base = tempfile.mkdtemp(prefix="mpbroker-bench-", dir=args.dir)
    total = args.megabytes * MB
    rows, data = [], {"append": [], "read": {}, "validate": {}}
    try:
        for message_size in (200, 10 * 1024):
            for label, per_set in (("50", 50), ("1 MB", messages_per_mb_set(message_size))):
                sets = build_sets(message_size, per_set, total)
                volume = sum(len(s) for s in sets) / MB
                plain = best_of(args.repeats, lambda: plain_write(base, sets))
                appended = best_of(args.repeats, lambda: log_append(base, sets, per_set))
                ratio = plain / appended
                rows.append([
                    f"append {message_size} B x {label}", f"{volume / appended:,.0f}",
                    f"{volume / plain:,.0f}", f"{ratio:.0%}",
                ])
                data["append"].append({
                    "message_bytes": message_size, "messages_per_set": per_set,
                    "log_mb_s": volume / appended, "plain_mb_s": volume / plain, "ratio": ratio,
                })

        # Read: a log of ~N MB of 200-byte messages, fetched in 1 MB regions.
        manager = LogManager(os.path.join(base, "read"), lambda topic: LogConfig(segment_bytes=256 * MB))
        log = manager.get_or_create("bench", 0)
        for buffer in build_sets(200, messages_per_mb_set(200), total):
            log.append(buffer, 1)
        log.flush()

        def log_read():
            offset = log.log_start
            while offset < log.flushed_end:
                region = log.read(offset, MB)
                if region.length == 0:
                    offset = min(b for b in log.segment_bases if b > offset)
                    continue
                os.pread(region.file.fd, region.length, region.position)
                offset += region.length

        files = [segment.path for segment in log._segments]

        def plain_read():
            for path in files:
                fd = os.open(path, os.O_RDONLY)
                position = 0
                while True:
                    chunk = os.pread(fd, MB, position)
                    if not chunk:
                        break
                    position += len(chunk)
                os.close(fd)

        volume = log.size / MB
        read_log = best_of(args.repeats, log_read)
        read_plain = best_of(args.repeats, plain_read)
        rows.append(["read 1 MB regions", f"{volume / read_log:,.0f}", f"{volume / read_plain:,.0f}",
                     f"{read_plain / read_log:.0%}"])
        data["read"] = {"log_mb_s": volume / read_log, "plain_mb_s": volume / read_plain,
                        "ratio": read_plain / read_log}
        manager.close()

        # Validation: 200-byte messages in 1 MB sets, one core.
        one_set = build_sets(200, messages_per_mb_set(200), MB)[0]
        count = validate_message_set(one_set).messages
        rounds = max(1, total // len(one_set))
        seconds = best_of(args.repeats, lambda: [validate_message_set(one_set) for _ in range(rounds)])
        rate = count * rounds / seconds
        data["validate"] = {"messages_per_s": rate, "message_bytes": 200}
        table = print_table(
            "Partition log vs plain file I/O (MB/s; ratio = log / plain)",
            ["operation", "log MB/s", "plain MB/s", "ratio"], rows,
        )
        line = f"\nvalidation: {rate / 1e6:.2f} million 200-byte messages/s on one core"
        print(line)
        write_results("log", table + "\n" + line, data)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=512, help="data per case (default 512)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the best counts (default 3)")
    parser.add_argument("--dir", default=None, help="where to write (default: the system temp dir)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
