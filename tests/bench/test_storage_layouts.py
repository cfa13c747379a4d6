"""``python -m bench.storage_layouts`` runs end to end at the smallest sizes into a scratch
directory (``--results-dir``), so ``bench/results/storage_layouts.*`` stay as the last full
run left them; and each layout's fetch delivers the very batches appended (baseOffset as
the layout sets it, CRCs intact), C's index lookup included. A few seconds; it checks that
the bench works, not what it measures."""

import json
import os
import subprocess
import sys

from kafka.record.default_records import DefaultRecordBatch

from bench import storage_layouts as sl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_run_writes_every_figure(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bench.storage_layouts", "--quick", "--mib", "1", "--repeats", "1", "--records", "1", "60",
         "--dir", str(tmp_path), "--results-dir", str(tmp_path / "results")],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    with open(tmp_path / "results" / "storage_layouts.json") as f:
        record = json.load(f)
    assert (tmp_path / "results" / "storage_layouts.md").exists()
    assert record["benchmark"] == "storage_layouts" and record["machine"]["cores"] >= 1
    assert record["command"].startswith("python -m bench.storage_layouts --quick")
    assert record["settings"]["quick"] is True and record["settings"]["records"] == [1, 60]
    assert [row["records"] for row in record["rows"]] == [1, 60]
    for row in record["rows"]:
        assert row["batch_bytes"] > 200 * row["records"], row
        for figures, base in ((row["fetch"], "raw_range_sendfile"), (row["append"], "raw")):
            assert figures[base]["ratio"] == 1.0
            for entry in figures.values():
                assert entry["best"] > 0 and len(entry["runs"]) == 1, entry
                assert abs(entry["ratio"] - entry["best"] / figures[base]["best"]) < 1e-9, entry
        per_message = row["disk_bytes_per_message"]
        assert per_message["raw"] == row["batch_bytes"] / row["records"]
        assert per_message["framed"] == (row["batch_bytes"] + 5) / row["records"]
        assert per_message["indexed"] == per_message["raw"] + 8 * row["index_entries"] / row["messages"]
    assert row["index_entries"] > 0  # 60-record batches pass 4 KiB every batch
    for label in sl.LABELS.values():
        assert label in run.stdout
    assert "nproc" in run.stdout and "command: python -m bench.storage_layouts" in run.stdout
    assert os.listdir(tmp_path) == ["results"]  # the segment files are gone


def _batches(data: bytes) -> list:
    batches, at = [], 0
    while at < len(data):
        size = sl.BATCH_LENGTH_AFTER + int.from_bytes(data[at + 8:at + 12], "big")
        batch = DefaultRecordBatch(data[at:at + size])
        assert batch.validate_crc()
        batches.append((batch.base_offset, data[at + 8:at + size]))
        at += size
    assert at == len(data)
    return batches


def test_every_fetch_delivers_the_appended_batches(tmp_path):
    records, count = 10, 40
    group = sl.batch_group(records)
    size = len(group[0])
    files = {layout: sl.APPENDS[layout](str(tmp_path), group, count) for layout in sl.LAYOUTS}
    assert os.path.getsize(files["raw"]["segment"]) == count * size
    assert os.path.getsize(files["framed"]["segment"]) == count * (size + 5)
    sizes, counts = [size] * count, [records] * count
    answers = sl.plan_answers(sizes, answer_bytes=5_000)  # two batches an answer
    assert answers[0] == (0, 2) and sum(taken for _, taken in answers) == count
    index = sl.load_index(files["indexed"]["index"])
    assert index[0] and len(index[0]) == len(index[1])
    for relative, position in zip(*index):
        assert position == relative // records * size  # each entry points at its batch's start
    bodies = [bytes(group[i % sl.GROUP][8:]) for i in range(count)]
    base_offsets = {"raw": [i * size for i in range(count)], "framed": [i * (size + 5) for i in range(count)],
                    "indexed": [i * records for i in range(count)]}
    for name in sl.FETCHES:
        layout = sl.FETCH_LAYOUT[name]
        requests = sl.requests_for(layout, answers, sizes, counts)
        rate, got = sl.fetch_run(name, files[layout], requests, index, keep=True)
        assert rate > 0
        batches = _batches(got["data"])
        assert [base for base, _ in batches] == base_offsets[layout], name
        assert [body for _, body in batches] == bodies, name
    # C: an offset inside a batch (and one before the first index entry) finds that batch
    for batch in (0, 1, 17, count - 1):
        requests = [(batch * records + 3, size)]
        _, got = sl.fetch_run("indexed_lookup_sendfile", files["indexed"], requests, index, keep=True)
        assert _batches(got["data"]) == [(batch * records, bodies[batch])]
