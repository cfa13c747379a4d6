"""The shim's event log, parsed (the line formats are documented in ``shim.c``).

A line that does not parse is set aside, not guessed at: a process killed in the
middle of a long ``write`` can leave a partial line that the next process's line
continues. Such a line belonged to a call that had not returned yet (the shim writes
after the real call and before returning), so nothing could have relied on it, and
dropping it only makes the model keep less.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FileSynced:  # fsync/fdatasync of a regular file
    inode: int
    size: int  # taken before the call
    path: str


@dataclass(frozen=True)
class DirectorySynced:  # fsync/fdatasync of a directory
    inode: int
    path: str
    entries: dict  # name -> inode, listed before the call


@dataclass(frozen=True)
class Truncated:  # ftruncate/truncate, or an open with O_TRUNC
    inode: int
    size: int
    path: str


@dataclass(frozen=True)
class Renamed:
    inode: int  # the inode that moved
    replaced: int  # the target's inode, hard-linked into the stash first; 0: no target
    source: str
    target: str


@dataclass(frozen=True)
class Unlinked:
    inode: int
    links_before: int
    path: str


@dataclass(frozen=True)
class Unsupported:  # something the model cannot represent (sync, syncfs, O_SYNC)
    what: str
    path: str


@dataclass
class EventLog:
    events: list = field(default_factory=list)
    unparsed: list = field(default_factory=list)  # lines set aside (see the module docstring)


def read_events(path: str) -> EventLog:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return EventLog()
    log = EventLog()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        log.unparsed.append(lines[-1].decode(errors="replace"))  # a last line without its newline
    for raw in lines[:-1]:
        line = raw.decode(errors="replace")
        try:
            log.events.append(parse_line(line))
        except ValueError:
            log.unparsed.append(line)
    return log


def parse_line(line: str):
    kind, pid, *fields = line.split("\t")
    int(pid)
    if kind == "F" and len(fields) == 3:
        return FileSynced(_number(fields[0]), _number(fields[1]), fields[2])
    if kind == "T" and len(fields) == 3:
        return Truncated(_number(fields[0]), _number(fields[1]), fields[2])
    if kind == "D" and len(fields) >= 2:
        return DirectorySynced(_number(fields[0]), fields[1], dict(_entry(text) for text in fields[2:]))
    if kind == "R" and len(fields) == 4:
        return Renamed(_number(fields[0]), _number(fields[1]), fields[2], fields[3])
    if kind == "U" and len(fields) == 3:
        return Unlinked(_number(fields[0]), _number(fields[1]), fields[2])
    if kind == "W" and len(fields) == 2:
        return Unsupported(fields[0], fields[1])
    raise ValueError(f"not an event line: {line!r}")


def _number(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"not a number: {text!r}")
    return int(text)


def _entry(text: str) -> tuple:
    name, slash, inode = text.rpartition("/")
    if not slash or not name:
        raise ValueError(f"not a <name>/<inode> pair: {text!r}")
    return name, _number(inode)
