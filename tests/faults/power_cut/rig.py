"""One watched tree and its power cuts: the files the shim writes (event log, stash),
the durable baseline, and ``cut``, which applies the model and starts a new epoch.

An epoch runs from one cut (or the start) to the next. At its start the tree on disk
is taken as durable (before the first run nothing has been written; after a cut, what
is on the disk is what survived), the event log is empty and so is the stash. Each
epoch's event log is kept next to the others (``events-<n>.log``) for a post-mortem.
"""

import os
import shutil

from .durable import DurableState
from .events import read_events
from .model import CutMode, CutReport, cut_power
from .shim import shim_environment


class PowerCutRig:
    def __init__(self, root: str, work_directory: str, shim_library: str, sync_delay_us: int = 0):
        os.makedirs(root, exist_ok=True)
        self.root = os.path.realpath(root)
        self.work_directory = os.path.realpath(work_directory)
        self.events_path = os.path.join(self.work_directory, "events.log")
        self.stash = os.path.join(self.work_directory, "stash")
        self.shim_library = shim_library
        self.sync_delay_us = sync_delay_us
        self.epoch = 0
        self.unparsed_lines = 0  # over all epochs: lines set aside (a process killed mid-write)
        self._start_epoch()

    def environment(self) -> dict:
        return shim_environment(self.shim_library, self.root, self.events_path, self.stash, self.sync_delay_us)

    def durable_state(self) -> DurableState:
        """What a power cut now would fall back to (raises UnsupportedEvent for what the
        model cannot represent)."""
        return self._replay()[0]

    def cut(self, mode: CutMode, rng) -> CutReport:
        """Cut the power: every process writing under the root must be dead."""
        state, unparsed = self._replay()
        self.unparsed_lines += unparsed
        report = cut_power(self.root, state, self.stash, mode, rng)
        self._start_epoch()
        return report

    def _replay(self) -> tuple:
        log = read_events(self.events_path)
        return self.baseline.copy().replay(log.events), len(log.unparsed)

    def _start_epoch(self) -> None:
        os.makedirs(self.work_directory, exist_ok=True)
        if os.path.exists(self.events_path):
            os.rename(self.events_path, os.path.join(self.work_directory, f"events-{self.epoch}.log"))
        self.epoch += 1
        shutil.rmtree(self.stash, ignore_errors=True)
        os.makedirs(self.stash)
        self.baseline = DurableState.of_tree(self.root)
