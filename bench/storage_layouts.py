"""Candidate on-disk layouts for serving the modern Kafka protocol (v2 record batches)
from a broker whose 0.7 offsets are byte positions: fetch and append throughput and
disk bytes per message, each as a ratio to layout A measured in the same run.

    python -m bench.storage_layouts [--quick] [--mib N] [--repeats R] [--records N ...]
                                    [--dir D] [--results-dir D]

The batches are real: kafka-python's ``DefaultRecordBatchBuilder`` (magic 2, no
compression, no key, no headers) with 1, 10, 60 and 1000 records of 200 random bytes
(270 B, 2,151 B, 12,601 B and 210,933 B a batch). Four distinct batches per size, copied
into a group of 64 distinct buffers that every append rewrites.

The layouts (one segment file per layout; ``--mib`` MiB of batch bytes each, default 128,
--quick 4):

A. ``raw``: the batches as they came, contiguous, baseOffset rewritten to the batch's byte
   position. A modern partition holds only batches; 0.7 data stays in 0.7 framing in
   other partitions (the format is per partition).
B. ``framed``: each batch inside a 0.7-style frame ``[int32 length][magic byte 2][batch]``,
   baseOffset rewritten to the frame's byte position, so 0.7 messages and v2 batches can
   share one log. A modern answer must leave out the 5-byte headers.
C. ``indexed``: Kafka's own design. Raw batches with logical offsets (baseOffset = the
   count of records before it) and a sparse offset index beside the segment: an entry
   ``[int32 relative offset][int32 position]`` (big-endian) for a batch whose append
   starts more than 4 KiB after the last entry's (Kafka's index.interval.bytes rule), so
   about 8 bytes per 4 KiB. The index is kept on every append, 0.7 and modern alike.

Append (page cache, no fsync): N batches written with ``os.writev`` in groups of 64 to a
fresh file opened O_APPEND. Per batch the broker's own work is done in Python, as a broker
would: A ``struct.pack_into`` of the baseOffset; B that and ``struct.pack`` of the frame
header, interleaved in the iovec list (128 buffers a writev); C reads the batch's
lastOffsetDelta to advance the logical offset, rewrites the baseOffset, checks the 4 KiB
rule, and writes the group's new index entries (if any) to the index file with one
``os.write``. MB/s counts batch bytes (the same for every layout).

Fetch (page cache warm: the files the last append run wrote, read through once): the
segment is read from start to end in answers of whole batches up to 1 MiB, the same
answers for every layout, sent on a loopback TCP connection (TCP_NODELAY on the sending
side, as the broker's) to a reader thread that drains them into a reused 4 MiB buffer; the
clock stops when the reader has every byte. Only the batches are sent (no answer header).
Per answer:

- A ``range sendfile``: the requested offset is the position; one ``os.sendfile`` of the
  range.
- B ``per-batch sendfile``: from the requested position, per batch one ``os.pread`` of the
  5-byte header (for the length) and one ``os.sendfile`` of the batch, under TCP_CORK
  (set and cleared per answer) so the small batches leave in full segments.
- B ``pread + strip``: one ``os.pread`` of the answer's range (headers included), the
  frames walked with ``struct.unpack_from``, one ``b"".join`` of memoryview slices of the
  batches, one ``sendall``.
- C ``index + sendfile``: ``bisect`` over the index (held in memory as two lists, as Kafka
  mmaps it) to the last entry at or before the requested logical offset, then Kafka's
  forward scan: one ``os.pread`` of each batch header (27 bytes) from that position until
  the batch that holds the offset, then one ``os.sendfile`` of the range.

Repeats: every measurement ``--repeats`` times (default 3), the candidates interleaved
(their order rotated each repeat) so that machine noise hits all of them; the table shows
the best run, the median, and the ratios to A of the bests and of the medians. Disk bytes
per message: the segment file's size (plus the index file's, C) over the records in it; a
0.7 message takes 210 (the 10-byte message header). MB = 10^6 bytes.
"""

import argparse
import bisect
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

from bench.common import RESULTS_DIR, machine, print_table, write_results
from bench.interrupts import stop_on_signals

MB = 1_000_000
MIB = 1 << 20
VALUE_BYTES = 200
STORED_07_BYTES = VALUE_BYTES + 10  # a 0.7 message on disk
RECORD_COUNTS = (1, 10, 60, 1000)
DISTINCT_BATCHES = 4
GROUP = 64  # batches per writev
ANSWER_BYTES = MIB
INDEX_INTERVAL = 4096
RECEIVE_BUFFER = 4 * MIB

FRAME = struct.Struct(">iB")  # 0.7 frame: length (of what follows), magic
FRAME_MAGIC = 2
HEADER_BYTES = FRAME.size
BASE_OFFSET = struct.Struct(">q")
LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_AT = 23
BATCH_HEAD = struct.Struct(">qi11xi")  # baseOffset, batchLength, (epoch, magic, crc, attributes), lastOffsetDelta
BATCH_LENGTH_AFTER = 12  # batchLength counts the bytes after baseOffset and itself
INDEX_ENTRY = struct.Struct(">ii")

LAYOUTS = ("raw", "framed", "indexed")
FETCHES = ("raw_range_sendfile", "framed_per_batch_sendfile", "framed_pread_strip", "indexed_lookup_sendfile")
FETCH_LAYOUT = dict(zip(FETCHES, ("raw", "framed", "framed", "indexed")))
LABELS = {
    "raw": "A raw",
    "framed": "B framed",
    "indexed": "C logical offsets + index",
    "raw_range_sendfile": "A raw: range sendfile",
    "framed_per_batch_sendfile": "B framed: per-batch sendfile",
    "framed_pread_strip": "B framed: pread + strip + send",
    "indexed_lookup_sendfile": "C index lookup + sendfile",
}
SIZES = {"default": {"mib": 128.0, "repeats": 3}, "quick": {"mib": 4.0, "repeats": 3}}


# --- batches ----------------------------------------------------------------------------


def build_batch(records: int, value_bytes: int = VALUE_BYTES) -> bytearray:
    """One real v2 record batch (magic 2, uncompressed) of ``records`` random values."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    now_ms = int(time.time() * 1000)
    for offset in range(records):
        builder.append(offset, timestamp=now_ms + offset, key=None, value=os.urandom(value_bytes), headers=[])
    return bytearray(builder.build())


def batch_group(records: int) -> list:
    """GROUP distinct buffers (copies of DISTINCT_BATCHES real batches) for the appends to rewrite."""
    batches = [build_batch(records) for _ in range(DISTINCT_BATCHES)]
    return [bytearray(batches[i % DISTINCT_BATCHES]) for i in range(GROUP)]


def batch_count(group: list, mib: float) -> int:
    return max(1, int(mib * MIB) // len(group[0]))


# --- append -----------------------------------------------------------------------------


def _open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)


def _groups(group: list, count: int):
    done = 0
    while done < count:
        take = min(GROUP, count - done)
        yield group if take == GROUP else group[:take]
        done += take


def _write_all(fd: int, parts: list) -> None:
    expected = sum(len(part) for part in parts)
    written = os.writev(fd, parts)
    if written != expected:  # a regular file takes it all; never measure less silently
        raise OSError(f"writev wrote {written} of {expected} bytes")


def append_raw(directory: str, group: list, count: int) -> dict:
    path = os.path.join(directory, "raw.log")
    fd = _open_append(path)
    pack = BASE_OFFSET.pack_into
    position = 0
    try:
        for parts in _groups(group, count):
            for batch in parts:
                pack(batch, 0, position)
                position += len(batch)
            _write_all(fd, parts)
    finally:
        os.close(fd)
    return {"segment": path}


def append_framed(directory: str, group: list, count: int) -> dict:
    path = os.path.join(directory, "framed.log")
    fd = _open_append(path)
    pack, frame = BASE_OFFSET.pack_into, FRAME.pack
    position = 0
    try:
        for parts in _groups(group, count):
            iovec = []
            for batch in parts:
                size = len(batch)
                pack(batch, 0, position)
                iovec.append(frame(size + 1, FRAME_MAGIC))
                iovec.append(batch)
                position += HEADER_BYTES + size
            _write_all(fd, iovec)
    finally:
        os.close(fd)
    return {"segment": path}


def append_indexed(directory: str, group: list, count: int) -> dict:
    path, index_path = os.path.join(directory, "indexed.log"), os.path.join(directory, "indexed.index")
    fd, index_fd = _open_append(path), _open_append(index_path)
    pack, entry = BASE_OFFSET.pack_into, INDEX_ENTRY.pack
    last_delta = LAST_OFFSET_DELTA.unpack_from
    base_offset = 0  # the segment's first offset; the index holds offsets relative to it
    offset = position = since_entry = 0
    try:
        for parts in _groups(group, count):
            entries = []
            for batch in parts:
                if since_entry > INDEX_INTERVAL:
                    entries.append(entry(offset - base_offset, position))
                    since_entry = 0
                size = len(batch)
                pack(batch, 0, offset)
                offset += last_delta(batch, LAST_OFFSET_DELTA_AT)[0] + 1
                position += size
                since_entry += size
            _write_all(fd, parts)
            if entries:
                os.write(index_fd, b"".join(entries))
    finally:
        os.close(fd)
        os.close(index_fd)
    return {"segment": path, "index": index_path}


APPENDS = {"raw": append_raw, "framed": append_framed, "indexed": append_indexed}


def files_bytes(files: dict) -> int:
    return sum(os.stat(path).st_size for path in files.values())


def remove_files(files: dict) -> None:
    for path in files.values():
        os.unlink(path)


# --- fetch ------------------------------------------------------------------------------


def plan_answers(batch_sizes: list, answer_bytes: int = ANSWER_BYTES) -> list:
    """``[(first batch, batches)]``: whole batches up to answer_bytes (at least one) each."""
    answers, first, taken, used = [], 0, 0, 0
    for size in batch_sizes:
        if taken and used + size > answer_bytes:
            answers.append((first, taken))
            first, taken, used = first + taken, 0, 0
        taken += 1
        used += size
    if taken:
        answers.append((first, taken))
    return answers


def requests_for(layout: str, answers: list, batch_sizes: list, records: list) -> list:
    """What a client asks per answer in this layout: ``(offset, payload bytes)`` (the offset is
    a byte position in A and B, a logical offset in C); B's also carry the range's length in
    the file (headers included) for pread + strip."""
    starts, position, offset = [], 0, 0
    step = HEADER_BYTES if layout == "framed" else 0
    for size, count in zip(batch_sizes, records):
        starts.append(offset if layout == "indexed" else position)
        position += step + size
        offset += count
    requests = []
    for first, taken in answers:
        payload = sum(batch_sizes[first:first + taken])
        if layout == "framed":
            requests.append((starts[first], payload, payload + HEADER_BYTES * taken))
        else:
            requests.append((starts[first], payload))
    return requests


def load_index(path: str) -> tuple:
    """The index as two lists (relative offsets, positions), as a broker holds it (Kafka mmaps it)."""
    with open(path, "rb") as f:
        data = f.read()
    offsets, positions = [], []
    for relative, position in INDEX_ENTRY.iter_unpack(data):
        offsets.append(relative)
        positions.append(position)
    return offsets, positions


def _sendfile_all(out: int, fd: int, position: int, left: int) -> None:
    while left:
        sent = os.sendfile(out, fd, position, left)
        if not sent:
            raise OSError(f"segment ended {left} bytes early")
        position += sent
        left -= sent


def serve_range(sock: socket.socket, fd: int, requests: list, index=None) -> None:
    out = sock.fileno()
    for position, payload in requests:
        _sendfile_all(out, fd, position, payload)


def serve_per_batch(sock: socket.socket, fd: int, requests: list, index=None) -> None:
    out, pread, unpack = sock.fileno(), os.pread, FRAME.unpack
    cork = sock.setsockopt
    for position, payload, _span in requests:
        cork(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        while payload:
            length, magic = unpack(pread(fd, HEADER_BYTES, position))
            if magic != FRAME_MAGIC:
                raise ValueError(f"frame at {position} has magic {magic}")
            length -= 1
            _sendfile_all(out, fd, position + HEADER_BYTES, length)
            position += HEADER_BYTES + length
            payload -= length
        cork(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


def serve_strip(sock: socket.socket, fd: int, requests: list, index=None) -> None:
    length_at = FRAME.unpack_from
    for position, _payload, span in requests:
        data = os.pread(fd, span, position)
        view = memoryview(data)
        parts, at = [], 0
        while at < span:
            length, magic = length_at(data, at)
            if magic != FRAME_MAGIC:
                raise ValueError(f"frame at {position + at} has magic {magic}")
            parts.append(view[at + HEADER_BYTES:at + 4 + length])
            at += 4 + length
        sock.sendall(b"".join(parts))
        del parts, view


def serve_indexed(sock: socket.socket, fd: int, requests: list, index=None) -> None:
    out, pread, head = sock.fileno(), os.pread, BATCH_HEAD.unpack
    offsets, positions = index
    find = bisect.bisect_right
    for offset, payload in requests:
        slot = find(offsets, offset) - 1  # relative to the segment's base offset, 0 here
        position = positions[slot] if slot >= 0 else 0
        while True:  # Kafka's forward scan to the batch holding the offset
            base, length, last_delta = head(pread(fd, BATCH_HEAD.size, position))
            if base + last_delta >= offset:
                break
            position += BATCH_LENGTH_AFTER + length
        _sendfile_all(out, fd, position, payload)


SERVES = {"raw_range_sendfile": serve_range, "framed_per_batch_sendfile": serve_per_batch,
          "framed_pread_strip": serve_strip, "indexed_lookup_sendfile": serve_indexed}


def tcp_pair() -> tuple:
    """(sending, receiving) ends of a loopback TCP connection; the sender has TCP_NODELAY."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    listener.close()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sender, receiver


def drain(sock: socket.socket, total: int, result: dict, keep: bool = False) -> None:
    """Receive ``total`` bytes into one reused buffer (``keep``: also keep a copy, for checks)."""
    buffer = bytearray(RECEIVE_BUFFER)
    view = memoryview(buffer)
    got, kept = 0, []
    try:
        while got < total:
            count = sock.recv_into(view)
            if not count:
                break
            if keep:
                kept.append(bytes(view[:count]))
            got += count
    finally:
        result["received"] = got
        if keep:
            result["data"] = b"".join(kept)


def fetch_run(name: str, files: dict, requests: list, index=None, keep: bool = False) -> tuple:
    """(MB/s, what the reader got): one pass of ``requests`` served by ``name``'s layout."""
    total = sum(request[1] for request in requests)
    sender, receiver = tcp_pair()
    fd = os.open(files["segment"], os.O_RDONLY)
    result = {}
    reader = threading.Thread(target=drain, args=(receiver, total, result, keep), daemon=True)
    try:
        reader.start()
        start = time.perf_counter()
        SERVES[name](sender, fd, requests, index)
        reader.join()
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        sender.close()
        reader.join()
        receiver.close()
    if result.get("received") != total:
        raise OSError(f"{name}: the reader got {result.get('received')} of {total} bytes")
    return total / elapsed / MB, result


def warm(files: dict) -> None:
    for path in files.values():
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while chunk := os.pread(fd, 8 * MIB, position):
                position += len(chunk)
        finally:
            os.close(fd)


# --- one batch size -----------------------------------------------------------------------


def rotated(names: tuple, repeat: int) -> list:
    shift = repeat % len(names)
    return list(names[shift:] + names[:shift])


def summary(runs: list) -> dict:
    return {"best": max(runs), "median": statistics.median(runs), "runs": runs}


def measure_size(records: int, args, directory: str) -> dict:
    group = batch_group(records)
    count = batch_count(group, args.mib)
    batch_bytes = len(group[0])
    payload = count * batch_bytes
    print(f"\n{records} records a batch ({batch_bytes:,} B), {count:,} batches, {payload / MIB:.1f} MiB ...", flush=True)

    append_runs = {layout: [] for layout in LAYOUTS}
    files = {}
    for repeat in range(args.repeats):
        for layout in rotated(LAYOUTS, repeat):
            if layout in files:
                remove_files(files.pop(layout))
            start = time.perf_counter()
            files[layout] = APPENDS[layout](directory, group, count)
            append_runs[layout].append(payload / (time.perf_counter() - start) / MB)
    disk = {layout: files_bytes(files[layout]) for layout in LAYOUTS}
    messages = count * records

    batch_sizes, batch_records = [batch_bytes] * count, [records] * count
    answers = plan_answers(batch_sizes)
    requests = {layout: requests_for(layout, answers, batch_sizes, batch_records) for layout in LAYOUTS}
    index = load_index(files["indexed"]["index"])
    for layout in LAYOUTS:
        warm(files[layout])
    fetch_runs = {name: [] for name in FETCHES}
    try:
        for repeat in range(args.repeats):
            for name in rotated(FETCHES, repeat):
                layout = FETCH_LAYOUT[name]
                rate, _ = fetch_run(name, files[layout], requests[layout], index)
                fetch_runs[name].append(rate)
    finally:
        for layout in LAYOUTS:
            remove_files(files[layout])

    fetch = {name: summary(runs) for name, runs in fetch_runs.items()}
    append = {layout: summary(runs) for layout, runs in append_runs.items()}
    for figures in (fetch, append):
        base = figures["raw_range_sendfile" if figures is fetch else "raw"]
        for entry in figures.values():
            entry["ratio"] = entry["best"] / base["best"]
            entry["median_ratio"] = entry["median"] / base["median"]
    row = {"records": records, "batch_bytes": batch_bytes, "batches": count, "messages": messages,
           "payload_bytes": payload, "answers": len(answers), "index_entries": len(index[0]),
           "fetch": fetch, "append": append,
           "disk_bytes": disk, "disk_bytes_per_message": {layout: disk[layout] / messages for layout in LAYOUTS}}
    for name in FETCHES:
        print(f"  fetch {LABELS[name]}: {fetch[name]['best']:,.0f} MB/s ({fetch[name]['ratio']:.2f}x)", flush=True)
    for layout in LAYOUTS:
        print(f"  append {LABELS[layout]}: {append[layout]['best']:,.0f} MB/s ({append[layout]['ratio']:.2f}x), "
              f"{row['disk_bytes_per_message'][layout]:.1f} B per message", flush=True)
    return row


# --- table ------------------------------------------------------------------------------


def size_label(row: dict) -> str:
    return f"{row['records']} x 200 B ({row['batch_bytes']:,} B)"


def fetch_table(rows: list, repeats: int) -> str:
    lines = []
    for row in rows:
        for name in FETCHES:
            entry = row["fetch"][name]
            lines.append([size_label(row), LABELS[name], f"{entry['best']:,.0f}", f"{entry['median']:,.0f}",
                          f"{entry['ratio']:.2f}x", f"{entry['median_ratio']:.2f}x"])
    return print_table(f"Fetch: whole batches in answers up to 1 MiB over loopback TCP, page cache warm "
                       f"(MB/s of batch bytes; best and median of {repeats}; ratios to A in the same run)",
                       ["batch", "layout: fetch", "best MB/s", "median MB/s", "ratio to A", "of medians"], lines)


def append_table(rows: list, repeats: int) -> str:
    lines = []
    for row in rows:
        for layout in LAYOUTS:
            entry = row["append"][layout]
            lines.append([size_label(row), LABELS[layout], f"{entry['best']:,.0f}", f"{entry['median']:,.0f}",
                          f"{entry['ratio']:.2f}x", f"{entry['median_ratio']:.2f}x",
                          f"{row['disk_bytes_per_message'][layout]:.1f}"])
    return print_table(f"Append: os.writev of 64 batches a call to the page cache, each layout's per-batch work "
                       f"in Python (MB/s of batch bytes; best and median of {repeats}; ratios to A), and disk "
                       f"bytes per 200-byte message (a 0.7 message: {STORED_07_BYTES})",
                       ["batch", "layout", "best MB/s", "median MB/s", "ratio to A", "of medians", "disk B/msg"], lines)


def command_line(argv) -> str:
    return " ".join(["python -m bench.storage_layouts", *argv])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 MiB per measurement instead of 128 (a few seconds)")
    parser.add_argument("--mib", type=float, help="MiB of batches per layout and measurement (default 128, --quick 4)")
    parser.add_argument("--repeats", type=int, help="runs of each measurement (default 3)")
    parser.add_argument("--records", type=int, nargs="+", default=list(RECORD_COUNTS),
                        help=f"records per batch, one row group each (default {' '.join(map(str, RECORD_COUNTS))})")
    parser.add_argument("--dir", default=None, help="where the segment files go (default: TMPDIR)")
    parser.add_argument("--results-dir", default=RESULTS_DIR, help="where storage_layouts.json and .md go")
    args = parser.parse_args(argv)
    for key, value in SIZES["quick" if args.quick else "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    stop_on_signals()
    here = machine()
    nproc = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    started = time.monotonic()
    directory = tempfile.mkdtemp(prefix="storage-layouts-", dir=args.dir)
    try:
        rows = [measure_size(records, args, directory) for records in args.records]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    load_after = os.getloadavg()
    seconds = time.monotonic() - started
    print()
    fetch_text = fetch_table(rows, args.repeats)
    print()
    append_text = append_table(rows, args.repeats)
    command = command_line(argv)
    spread = "; ".join(f"{row['records']}: {min(row['fetch']['raw_range_sendfile']['runs']):,.0f} to "
                       f"{max(row['fetch']['raw_range_sendfile']['runs']):,.0f}" for row in rows)
    noise = (f"noise: A's fetch runs ranged (MB/s, by records a batch) {spread}. A and C make the same sendfile "
             f"calls (C adds a bisect and a few 27-byte header preads per 1 MiB answer): read a gap between "
             f"them against this spread")
    notes = (f"{noise}\n"
             f"machine: nproc {nproc}, {here['cpu'] or 'unknown CPU'}, {here['memory_gib']} GiB, kernel "
             f"{here['kernel']}, Python {here['python']}; {args.mib:g} MiB of batches per layout and measurement; "
             f"load average (1 min) {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end; "
             f"{seconds:.0f} s\ncommand: {command}")
    print(f"\n{notes}")
    write_results("storage_layouts", "\n\n".join([fetch_text, append_text, notes]), {
        "command": command,
        "settings": {"quick": args.quick, "mib": args.mib, "repeats": args.repeats, "records": args.records,
                     "value_bytes": VALUE_BYTES, "answer_bytes": ANSWER_BYTES, "group": GROUP,
                     "index_interval_bytes": INDEX_INTERVAL, "frame_header_bytes": HEADER_BYTES,
                     "distinct_batches": DISTINCT_BATCHES, "nproc": nproc},
        "baseline": {"fetch": "raw_range_sendfile", "append": "raw"},
        "rows": rows,
        "seconds": round(seconds, 1),
        "load_average": {"start": [round(x, 2) for x in load_before], "end": [round(x, 2) for x in load_after]},
    }, args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
