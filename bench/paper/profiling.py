"""``--profile DIR`` of the paper benchmark: mpbroker's client side of every run under
cProfile (``DIR/client-<system>-<run>.prof``), and the broker's children through
$MPBROKER_PROFILE_DIR (``DIR/<role>-<pid>.prof``, written when the broker stops).

    python -m pstats DIR/client-mpbroker-b50-ff.prof     (then: sort tottime, stats 25)
"""

import contextlib
import cProfile
import os


def profile_brokers_into(directory: str) -> None:
    """Brokers started from now on (child processes) profile their children."""
    os.makedirs(directory, exist_ok=True)
    os.environ["MPBROKER_PROFILE_DIR"] = os.path.abspath(directory)


@contextlib.contextmanager
def client_profile(directory: str | None, name: str):
    """Profile the block into ``directory/client-<name>.prof``; nothing without a directory."""
    if not directory:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(os.path.join(directory, f"client-{name}.prof"))
