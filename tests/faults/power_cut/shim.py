"""Building the recording shim (``shim.c``) and the environment that loads it.

The shim is compiled by the test run itself, with the system's C compiler, into a
temporary directory (as ``tests/faults/test_storage_faults.py`` does for its failing
fdatasync), so nothing binary is kept in the repository.
"""

import os
import shutil
import subprocess

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.c")

ROOT_VARIABLE = "MPBROKER_POWER_CUT_ROOT"
EVENTS_VARIABLE = "MPBROKER_POWER_CUT_EVENTS"
STASH_VARIABLE = "MPBROKER_POWER_CUT_STASH"
SYNC_DELAY_VARIABLE = "MPBROKER_POWER_CUT_SYNC_DELAY_US"


class NoCompiler(Exception):
    pass


def build_shim(directory: str) -> str:
    """Compile the shim into ``directory``; return the library's path. NoCompiler if
    there is no C compiler; CalledProcessError (with the compiler's output) if it fails."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NoCompiler("no C compiler (cc or gcc) to build the power-cut shim")
    library = os.path.join(directory, "power_cut_shim.so")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-o", library, SOURCE, "-ldl"],
                   check=True, capture_output=True, text=True)
    return library


def shim_environment(library: str, root: str, events: str, stash: str, sync_delay_us: int = 0) -> dict:
    """Environment variables that make a process (and its children) record under ``root``;
    ``sync_delay_us`` makes every sync there that much slower (a slow disk)."""
    preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    return {
        "LD_PRELOAD": preload,
        ROOT_VARIABLE: os.path.realpath(root),
        EVENTS_VARIABLE: os.path.abspath(events),
        STASH_VARIABLE: os.path.abspath(stash),
        SYNC_DELAY_VARIABLE: str(sync_delay_us),
    }
