"""A power-cut simulation for the fault suite.

A SIGKILL keeps the page cache, so it loses nothing written; a power cut loses every
byte and every directory entry that no fsync/fdatasync covered. To test that, a
program runs with a recording shim preloaded (``shim.c``, built by ``shim.py``) that
logs every sync, truncation, rename and unlink under one directory tree; after the
program is killed, the model (``model.py``) turns the tree into what a power cut at
that moment would leave, from a durable baseline (``durable.py``) moved forward by
the logged events (``events.py``). ``rig.PowerCutRig`` ties it together for one tree.
``scratch_writer`` is the program the harness's own tests run; ``fire_and_forget``
is load for the broker test, ``committer`` the committing group member of the commit test.

Written here because nothing on PyPI or in Debian does this from user space: the
known crash-consistency tools record writes below the file system (dm-log-writes,
CrashMonkey's kernel module, ALICE's strace-based replays of whole programs), which
this machine cannot load or which would not follow a multi-process broker with
threads.
"""

from .durable import DurableState, UnsupportedEvent
from .model import CutMode, CutReport, cut_power
from .rig import PowerCutRig
from .shim import NoCompiler, build_shim

__all__ = ["CutMode", "CutReport", "DurableState", "NoCompiler", "PowerCutRig", "UnsupportedEvent", "build_shim",
           "cut_power"]
