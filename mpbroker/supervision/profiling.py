"""Profiling the children: with ``$MPBROKER_PROFILE_DIR`` naming a directory, each
child's main runs under cProfile and its stats land in ``<dir>/<role>-<pid>.prof``
when it exits (``python -m pstats`` or snakeviz reads them)."""

import os


def profiled(target, supervisor, child) -> int:
    """Run ``target(supervisor, child)``; under cProfile when $MPBROKER_PROFILE_DIR is set."""
    directory = os.environ.get("MPBROKER_PROFILE_DIR")
    if not directory:
        return target(supervisor, child)
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(target, supervisor, child)
    finally:
        name = f"worker{child.slot}" if child.role == "worker" else child.role
        profiler.dump_stats(os.path.join(directory, f"{name}-{os.getpid()}.prof"))
