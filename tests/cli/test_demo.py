"""The quick start's ``mpbroker-demo``: it runs end to end and does what it says, plain,
gzip and snappy sets on disk (it once said gzip and sent none)."""

import os
import re
import struct
import subprocess
import sys

from mpbroker.codec.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY


def _top_level_codecs(path: str) -> list:
    """The codec of each top-level message of a segment file (magic 1 only: the broker writes it)."""
    data = open(path, "rb").read()
    codecs, pos = [], 0
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        magic, attributes = data[pos + 4], data[pos + 5]
        assert magic == 1
        codecs.append(attributes & 3)
        pos += 4 + length
    assert pos == len(data)
    return codecs


def test_the_demo_produces_plain_gzip_and_snappy_sets_and_reads_them_back(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "mpbroker.cli.demo", "--keep"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "gzip-compressed" in out and "snappy-compressed" in out
    consumed = re.findall(r"consumed page-views-\d: (\S+)", out)
    assert sorted(consumed) == sorted(["/home", "/about", "/pricing", "/docs", "/blog", "/jobs", "/team", "/faq", "/"])
    assert "broker stopped gracefully (exit code 0)" in out
    kept = re.search(r"kept (\S+)", out).group(1)
    codecs = []
    for root, _dirs, files in os.walk(kept):
        codecs += [c for name in files if name.endswith(".kafka") for c in _top_level_codecs(os.path.join(root, name))]
    assert {CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY} <= set(codecs), codecs
