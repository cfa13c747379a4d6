"""``ruff check`` over the repository, with the rules in pyproject.toml (``[tool.ruff.lint]``:
undefined and unused names, syntax errors, import order). A finding fails this test, and
so CI."""

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    assert ruff, "ruff is missing: pip install -e '.[test]' installs it"
    run = subprocess.run([ruff, "check", "--no-cache", REPO], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
