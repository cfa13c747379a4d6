"""CPU time of processes, from /proc: what a process (or a broker: its supervisor and
every child) spent over a measured stretch. For the tests that check a process does
not spin, and the benchmarks that report CPU per request beside the rate."""

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


def tree_cpu_seconds(root: int) -> float:
    """User + system seconds of ``root`` and every live descendant (a child that already
    ended is not counted: measure across a stretch where the process tree is stable)."""
    children, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat_fields(entry)
        except OSError:  # ended meanwhile
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total
