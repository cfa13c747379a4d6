"""Processes from /proc: a process tree (a broker: its supervisor and every child), and
the CPU time a process or a tree spent over a measured stretch. For the tests that
check a process does not spin or how the broker's processes run, and the benchmarks
that report CPU per request beside the rate."""

import os

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid) -> list:
    with open(f"/proc/{pid}/stat") as stat_file:
        return stat_file.read().rsplit(")", 1)[1].split()  # the name may hold spaces


def cpu_seconds(pid: int, if_gone: float | None = None) -> float:
    """User plus system CPU seconds of one process so far. A process that is gone
    raises FileNotFoundError, unless ``if_gone`` says what to count for it instead."""
    try:
        fields = _stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):
        if if_gone is None:
            raise
        return if_gone
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _live_processes() -> dict:
    """``{pid: its /proc stat fields}`` of every process alive now."""
    processes = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                processes[int(entry)] = _stat_fields(entry)
            except OSError:  # ended meanwhile
                pass
    return processes


def process_tree(root: int, processes: dict | None = None) -> list:
    """``root`` and every live descendant of it (of ``processes``, from ``_live_processes``)."""
    processes = _live_processes() if processes is None else processes
    children = {}
    for pid, fields in processes.items():
        children.setdefault(int(fields[1]), []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def tree_cpu_seconds(root: int) -> float:
    """User + system seconds of ``root`` and every live descendant (a child that already
    ended is not counted: measure across a stretch where the process tree is stable)."""
    processes = _live_processes()
    return sum((int(processes[pid][11]) + int(processes[pid][12])) / TICKS_PER_S
               for pid in process_tree(root, processes) if pid in processes)
