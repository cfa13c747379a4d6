"""The layering of ARCHITECTURE.md ("Layers"), checked: ``lint-imports`` with the
contracts in pyproject.toml. A lower layer that imports a higher one fails this test,
and so CI."""

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_layer_imports_a_layer_above_it():
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert lint, "lint-imports is missing: pip install -e '.[test]' installs import-linter"
    run = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout, run.stdout[-2000:]
