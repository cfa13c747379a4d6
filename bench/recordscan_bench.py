"""validate_batches of one uncompressed batch of 1000 records (200-byte values, no key
or headers), the C record walk (mpbroker/records/_recordscan.c) against the Python one:
best of 7, in ns per record (the batch's header and CRC-32C included).

    python -m bench.recordscan_bench
"""

import time

from bench.common import print_table, write_results
from mpbroker.records import batch, encode_batch

RECORDS = 1000
REPEAT = 7
LOOPS = 200


def best_ns_per_record(buf) -> float:
    validate = batch.validate_batches
    best = float("inf")
    for _ in range(REPEAT):
        start = time.perf_counter_ns()
        for _ in range(LOOPS):
            validate(buf)
        best = min(best, (time.perf_counter_ns() - start) / LOOPS / RECORDS)
    return best


def main() -> None:
    buf = encode_batch([(None, bytes(200), (), 1_700_000_000_000 + i) for i in range(RECORDS)])
    saved = batch._c_walk
    if saved is None:
        raise SystemExit("mpbroker.records._recordscan is not built (or MPBROKER_PURE_PYTHON is set)")
    try:
        batch._c_walk = None
        python = best_ns_per_record(buf)
        batch._c_walk = saved
        c = best_ns_per_record(buf)
    finally:
        batch._c_walk = saved
    table = print_table(
        f"validate_batches of one {len(buf):,}-byte batch of {RECORDS} x 200 B records, best of {REPEAT}",
        ["walk", "ns per record", "ratio to Python"],
        [["Python (`batch._walk`)", f"{python:.0f}", "1.00x"], ["C (`_recordscan.walk`)", f"{c:.1f}",
                                                                 f"{python / c:.0f}x"]])
    write_results("recordscan", table, {"python_ns_per_record": python, "c_ns_per_record": c,
                                        "batch_bytes": len(buf), "records": RECORDS})


if __name__ == "__main__":
    main()
