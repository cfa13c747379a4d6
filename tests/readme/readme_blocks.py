"""The shell blocks of README.md, as the walk runs them: every ```sh block (and each
```python block the walk runs) is preceded by an HTML comment that names it, ``<!-- walk: NAME -->`` (tests/readme/test_readme_walk.py
runs it as written) or ``<!-- walk: NAME (covered by tests/x.py) -->`` (another test runs
it, named), or ``<!-- not walked: why -->`` (a long benchmark or fault run, said why).
A block without one fails the walk, so a command added to the README is walked or
explained.

``commands(text)`` splits a block into its commands: one per line, backslash continuations
joined, blank lines and whole-line comments dropped (a trailing ``# note`` stays: bash
ignores it as the reader would). ``block(name)`` is one named block's text; ``under(root,
text)`` moves the absolute /opt, /etc and /var paths of an install recipe under a scratch
root, for the tests that run the operator's recipes (tests/ops/)."""

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
_MARKER = re.compile(r"<!--\s*(walk|not walked):\s*(.*?)\s*-->")
# /opt/..., /etc/..., /var/... that start a word: not inside a path that is already longer.
_SYSTEM_PATH = re.compile(r"(?<![\w./-])/(opt|etc|var)/")


@dataclass
class Block:
    name: str  # the walk's name, or "" for a block not walked
    covered_by: str  # "" when the walk itself runs it; else the test that does
    reason: str  # for a block not walked
    line: int  # where its fence opens in README.md
    text: str

    @property
    def commands(self) -> list:
        return commands(self.text)


def commands(text: str) -> list:
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.lstrip()
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        out.append(line.strip())
    if pending:
        out.append(pending.strip())
    return out


def blocks(path: Path = README) -> list:
    """Every ```sh block of the README with its marker, and every marked ```python block;
    ValueError names an unmarked ```sh block."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence in ("```sh", "```python"):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            text = "\n".join(lines[i + 1:j])
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = _MARKER.search(lines[k]) if k >= 0 else None
            if marker is None and fence == "```python":
                i = j + 1
                continue  # an example of the API, not a command
            if marker is None:
                raise ValueError(f"README.md line {start + 1}: a ```sh block without a <!-- walk: NAME --> "
                                 f"or <!-- not walked: why --> comment before it")
            if marker.group(1) == "walk":
                name, _, covered = marker.group(2).partition(" (covered by ")
                found.append(Block(name.strip(), covered.rstrip(")").strip(), "", start + 1, text))
            else:
                found.append(Block("", "", marker.group(2), start + 1, text))
            i = j + 1
        else:
            i += 1
    return found


def walked(path: Path = README) -> dict:
    """name -> Block, for the blocks the walk itself runs (names are unique)."""
    out = {}
    for block in blocks(path):
        if block.name and not block.covered_by:
            if block.name in out:
                raise ValueError(f"README.md line {block.line}: walk name {block.name!r} used twice")
            out[block.name] = block
    return out


def block(name: str, path: Path = README) -> str:
    """The text of the block marked ``<!-- walk: NAME ... -->`` (covered elsewhere or not)."""
    for found in blocks(path):
        if found.name == name:
            return found.text
    raise AssertionError(f"README.md has no <!-- walk: {name} ... --> block")


def under(root: Path, text: str) -> str:
    """``text`` with every /opt/, /etc/ and /var/ path moved under ``root``."""
    moved = _SYSTEM_PATH.sub(lambda m: f"{root}/{m.group(1)}/", text)
    assert not _SYSTEM_PATH.search(moved), moved  # nothing outside the scratch root is touched
    return moved
