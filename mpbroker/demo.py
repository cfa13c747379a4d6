"""``mpbroker-demo``: a first look at the partition log, end to end.

Appends plain, gzip and snappy message sets to a partition log in a temporary
``log.dir``, flushes, reads them back from the segment files and prints what a
consumer would see. (Becomes the broker's produce/consume demo once it lands.)
"""

import argparse
import os
import shutil
import tempfile

from mpbroker.segments import LogConfig, LogManager
from mpbroker.segments.compression import compress
from mpbroker.segments.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from mpbroker.segments.message_set import iter_messages, validate_message_set


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-dir", help="keep the log here instead of a temporary directory")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="mpbroker-demo-")
    manager = LogManager(log_dir, lambda topic: LogConfig(segment_bytes=256))
    try:
        log = manager.get_or_create("page-views", 0)
        batches = [
            ("plain", encode_message_set([b"/home", b"/about", b"/pricing"])),
            ("gzip", encode_message(compress(CODEC_GZIP, encode_message_set([b"/docs", b"/blog"])), CODEC_GZIP)),
            ("snappy", encode_message(compress(CODEC_SNAPPY, encode_message_set([b"/jobs"])), CODEC_SNAPPY)),
        ]
        for name, message_set in batches:
            check = validate_message_set(message_set)
            offset = log.append(message_set, check.messages)
            print(f"appended a {name} set of {len(message_set)} bytes at offset {offset}")
        log.flush()
        print(f"log {log.topic}-{log.partition}: segments {log.segment_bases}, flushed end {log.flushed_end}")
        offset = log.log_start
        while offset < log.flushed_end:
            chunk = log.read_bytes(offset, 1 << 20)
            for next_offset, payload in iter_messages(chunk, offset):
                print(f"  consumed {payload.decode():10s} next offset {next_offset}")
            offset += len(chunk)
        print(f"latest offsets: {log.offsets_before(-1, 10)}")
    finally:
        manager.close()
        if not args.log_dir:
            shutil.rmtree(log_dir)
    print(f"segment files lived in {os.path.join(log_dir, 'page-views-0')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
