"""Partition-log benchmark: append and read throughput next to plain file I/O of the
same bytes in the same run, and message-set validation speed.

    python -m bench.log_bench [--megabytes N] [--repeats R] [--dir PATH]

    python -m bench.log_bench --validation-only

Append writes N MB of pre-built, pre-validated message sets through ``Log.append``
(200-byte and 10 KB messages, in sets of 50 messages and of ~1 MB) and compares with
``os.write`` of the very same buffers to a plain file. Read fetches the log back in
1 MB ``Log.read`` regions (``os.pread``) against plain ``os.pread``. Validation
counts 200-byte messages per second on one core, and times ``validate_message_set``
and ``decode_messages`` with the C loop (``mpbroker.codec._fastscan``) and with the
pure-Python one, next to one CRC of the whole buffer (``mpbroker.codec.message.crc32``:
the folding CRC the C loop uses, where it runs, else zlib's): a produce of 50 x
200 B, a 1 MB set of 1 KB messages, a 64 MB segment (validated shallow, as recovery
does), and a 1 MB fetch answer of 200 B messages decoded.
"""

import argparse
import contextlib
import os
import shutil
import tempfile
import time

from bench.common import best_of, print_table, write_results
from mpbroker.codec import message_set
from mpbroker.codec.message import crc32, encode_message_set
from mpbroker.codec.message_set import decode_messages, validate_message_set
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


@contextlib.contextmanager
def python_loops():
    """message_set with its pure-Python loops (as with MPBROKER_PURE_PYTHON=1)."""
    saved = message_set._scan, message_set._decode
    message_set._scan = message_set._decode = None
    try:
        yield
    finally:
        message_set._scan, message_set._decode = saved


def per_call(repeats: int, run, seconds: float = 0.2) -> float:
    """Seconds per ``run()``: the best of ``repeats`` rounds of about ``seconds`` each."""
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 4:
        run()
        calls += 1
    rounds = max(1, int(calls * 4))

    def many():
        for _ in range(rounds):
            run()  # each answer dropped at once (a list of 1 MB decodes would time the allocator)

    return best_of(repeats, many) / rounds


def validation_loops(repeats: int) -> tuple:
    """validate_message_set and decode_messages with the C loop and the Python one."""
    unlimited = 1 << 62
    segment = memoryview(build_sets(1024, messages_per_mb_set(1024), MB)[0] * 64)
    cases = [
        ("validate 50 x 200 B (a produce)", build_sets(200, 50, 1)[0], validate_message_set),
        ("validate 1 MB of 1 KB", build_sets(1024, messages_per_mb_set(1024), MB)[0], validate_message_set),
        ("validate 64 MB segment of 1 KB, shallow", segment,
         lambda buf: validate_message_set(buf, unlimited, deep=False)),
        ("decode 1 MB of 200 B (a fetch)", build_sets(200, messages_per_mb_set(200), MB)[0], decode_messages),
    ]
    rows, data = [], []
    for label, buf, function in cases:
        messages = validate_message_set(buf, unlimited).messages
        c = per_call(repeats, lambda: function(buf)) if message_set._scan is not None else None
        with python_loops():
            python = per_call(repeats, lambda: function(buf))
        crc = per_call(repeats, lambda: crc32(buf))
        rows.append([
            label, f"{c * 1e6:,.1f}" if c else "not built", f"{python * 1e6:,.1f}",
            f"{python / c:.1f}x" if c else "", f"{c * 1e9 / messages:,.0f}" if c else "",
            f"{python * 1e9 / messages:,.0f}", f"{crc * 1e6:,.1f}",
        ])
        data.append({"case": label, "messages": messages, "bytes": len(buf), "c_s": c, "python_s": python,
                     "crc32_whole_s": crc})
    table = print_table(
        "Message-set loops: C (mpbroker.codec._fastscan) vs pure Python, per call",
        ["case", "C us", "Python us", "speed-up", "C ns/msg", "Python ns/msg", "crc32 of it all, us"], rows,
    )
    segment.release()
    return table, data


def run(args) -> None:
    if args.validation_only:
        table, loops = validation_loops(args.repeats)
        write_results("validation", table, {"loops": loops})
        return
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
        loops_table, data["loops"] = validation_loops(args.repeats)
        write_results("log", table + "\n" + line + "\n\n" + loops_table, data)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=512, help="data per case (default 512)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the best counts (default 3)")
    parser.add_argument("--dir", default=None, help="where to write (default: the system temp dir)")
    parser.add_argument("--validation-only", action="store_true",
                        help="only the C vs Python validation table (writes bench/results/validation.*)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
