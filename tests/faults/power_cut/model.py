"""The power-cut model: turns a directory tree, in place, into what a power cut at this
moment would leave on the disk, given what is durable (``durable.DurableState``: the
tree before the program first ran, moved forward by the shim's events).

What it does, walking from the root:

- In each directory, an entry that no sync of that directory covered (its name is not
  in the directory's last synced listing) is removed, ``rm -rf`` for a directory. A
  directory never synced since it was created therefore loses everything under it,
  and the same rule applies from the root down (a directory whose own entry is lost
  goes with all it holds).
- A name whose durable inode is not the one there now (a rename replaced it after the
  last sync of the directory) gets the old inode back: the shim hard-linked a replaced
  target into the stash. Without it, the name disappears. A durable name that is gone
  because it was renamed away (its inode is still in the tree) is put back too.
- Every file is cut back to its durable size: the size at its inode's last sync, or
  less if a truncation after that sync cut it shorter; 0 for a file never synced.

Modes (``CutMode``):

- ``strict``: exactly that; every byte and every entry no sync covered is gone.
- ``random``: as real disks do, some of what was not synced made it anyway. Each file
  keeps a seeded random prefix of the bytes written after its last sync (none, all, or
  a random length), and now and then that kept part ends in a few garbage bytes (a torn
  sector: random bytes or zeros). Each entry no directory sync covered (a new name, or
  a name a rename replaced) survives with probability ``KEEP_UNSYNCED_ENTRY`` (a
  journal commit for another file took it along), its file's data treated the same
  way (a file never synced keeps a random prefix of everything written to it).
  Garbage never reaches into synced bytes.

Not modelled: a deleted name coming back (an ``unlink`` no directory sync covered:
the shim does not keep deleted files, so the model cannot put their data back), data
overwritten in place after a sync (the model cuts tails: the files it is used for
are only appended to, truncated, created and renamed), metadata other than names
and sizes (modes, times), and a rename between two directories surviving in one and
not in the other (random mode could then leave both names; nothing here renames
across directories).
"""

import os
import shutil
import stat
from dataclasses import dataclass, field
from enum import Enum

from .durable import DurableState

KEEP_UNSYNCED_ENTRY = 0.5  # random mode: chance that an entry no sync covered survives
TORN_TAIL = 1 / 3  # random mode: chance that a kept unsynced tail ends in garbage
MAX_GARBAGE = 64  # bytes of garbage at most (a few sectors' worth of a torn write)
HELD = "held"  # under the stash: inodes held while their names are rearranged


class CutMode(str, Enum):
    STRICT = "strict"  # every byte and entry not covered by a sync is gone
    RANDOM = "random"  # some of it survived, as on a real disk

    def __str__(self) -> str:
        return self.value


@dataclass
class CutReport:
    mode: CutMode
    bytes_cut: int = 0  # unsynced file tails dropped
    bytes_removed: int = 0  # data in files that went with their unsynced entries
    removed: list = field(default_factory=list)  # paths (relative to the root) no sync covered
    kept_unsynced: list = field(default_factory=list)  # random mode: survived without a sync
    restored: list = field(default_factory=list)  # names given back their durable inode
    lost_names: list = field(default_factory=list)  # replaced durable names whose inode was not to be had
    deleted_names: list = field(default_factory=list)  # durable names deleted since: not put back
    torn: list = field(default_factory=list)  # files whose kept tail ends in garbage
    cut_files: dict = field(default_factory=dict)  # path -> (size before, size after)

    @property
    def bytes_dropped(self) -> int:
        return self.bytes_cut + self.bytes_removed

    def summary(self) -> str:
        headline = (f"{self.mode}: dropped {self.bytes_dropped} bytes ({self.bytes_cut} in tails, "
                    f"{self.bytes_removed} in removed files)")
        parts = [headline]
        for label, paths in (("removed", self.removed), ("kept unsynced", self.kept_unsynced),
                             ("restored", self.restored), ("lost names", self.lost_names),
                             ("deleted, not put back", self.deleted_names),
                             ("torn", self.torn)):
            if paths:
                parts.append(f"{label}: {', '.join(sorted(paths))}")
        return "; ".join(parts)


def cut_power(root: str, durable: DurableState, stash: str, mode: CutMode, rng) -> CutReport:
    """Apply a power cut to ``root`` (nothing may be writing to it); ``rng`` decides
    what survives in random mode. ``stash`` is the shim's stash directory."""
    cut = _PowerCut(os.path.realpath(root), durable, stash, CutMode(mode), rng)
    cut.run()
    return cut.report


class _PowerCut:
    def __init__(self, root, durable, stash, mode, rng):
        self.root = root
        self.durable = durable
        self.stash = stash
        self.mode = mode
        self.rng = rng
        self.report = CutReport(mode)
        self.inode_sources = {}  # inode -> a path outside the root that keeps it alive
        self.cut_inodes = set()  # files already cut (an inode may have several names)
        self.kept_unsynced_inodes = set()  # random mode: a rename that made it (its old name stays gone)

    def run(self) -> None:
        if os.lstat(self.root).st_ino != self.durable.root_inode:
            raise ValueError(f"{self.root} is not the directory the durable state describes")
        self._hold_inodes()
        try:
            self._directory(self.root)
        finally:
            shutil.rmtree(os.path.join(self.stash, HELD), ignore_errors=True)

    # --- walking the tree -------------------------------------------------------

    def _directory(self, path: str) -> None:
        durable_entries = self.durable.listings.get(os.lstat(path).st_ino, {})
        present = {name: os.lstat(os.path.join(path, name)).st_ino for name in os.listdir(path)}
        # Which unsynced entries survive is decided for the whole directory first: a
        # rename is one journal transaction, so an inode a surviving rename moved to a new
        # name is not also given back under its old one, whichever name comes first.
        survives = {name for name, inode in sorted(present.items())
                    if durable_entries.get(name) != inode and self._unsynced_change_survives()}
        self.kept_unsynced_inodes.update(present[name] for name in survives)
        for name, inode in sorted(present.items()):
            child = os.path.join(path, name)
            durable_inode = durable_entries.get(name)
            if durable_inode == inode:
                self._keep(child)
            elif name in survives:
                self.report.kept_unsynced.append(self._relative(child))
                self._keep(child)
            elif durable_inode is not None:  # replaced after the last sync of this directory
                self._remove(child, unsynced=False)
                self._restore(child, durable_inode, replaced=True)
            else:
                self._remove(child, unsynced=True)
        for name, durable_inode in sorted(durable_entries.items()):
            if name not in present:  # renamed away (put back) or deleted (not modelled)
                self._restore(os.path.join(path, name), durable_inode, replaced=False)

    def _unsynced_change_survives(self) -> bool:
        return self.mode is CutMode.RANDOM and self.rng.random() < KEEP_UNSYNCED_ENTRY

    def _keep(self, path: str) -> None:
        status = os.lstat(path)
        if stat.S_ISDIR(status.st_mode):
            self._directory(path)
        elif stat.S_ISREG(status.st_mode):
            self._cut_file(path, status)

    # --- names --------------------------------------------------------------------

    def _hold_inodes(self) -> None:
        """Hard-link every file a durable name may need into the stash, so that removing
        its current name does not destroy it; note the shim's stashed inodes."""
        held = os.path.join(self.stash, HELD)
        os.makedirs(held, exist_ok=True)
        for name in os.listdir(self.stash):
            if name.isdigit():
                self.inode_sources[int(name)] = os.path.join(self.stash, name)
        wanted = {inode for entries in self.durable.listings.values() for inode in entries.values()}
        for directory, _, files in os.walk(self.root):
            for name in files:
                path = os.path.join(directory, name)
                status = os.lstat(path)
                if status.st_ino in wanted and status.st_ino not in self.inode_sources and stat.S_ISREG(status.st_mode):
                    source = os.path.join(held, str(status.st_ino))
                    os.link(path, source)
                    self.inode_sources[status.st_ino] = source

    def _restore(self, path: str, inode: int, replaced: bool) -> None:
        """Give ``path`` back its durable ``inode``: the name is there with another inode
        (``replaced``) or gone (renamed away: put back; deleted: not modelled)."""
        if inode in self.kept_unsynced_inodes:
            return  # renamed, and the rename survived: the old name went with it
        source = None if inode in self.durable.unlinked else self.inode_sources.get(inode)
        if source is None:
            (self.report.lost_names if replaced else self.report.deleted_names).append(self._relative(path))
            return
        os.link(source, path)
        self.report.restored.append(self._relative(path))
        self._cut_file(path, os.lstat(path))

    def _remove(self, path: str, unsynced: bool) -> None:
        status = os.lstat(path)
        if stat.S_ISDIR(status.st_mode):
            for directory, _, files in os.walk(path):
                for name in files:
                    self._count_removed(os.lstat(os.path.join(directory, name)))
            shutil.rmtree(path)
        else:
            self._count_removed(status)
            os.unlink(path)
        if unsynced:
            self.report.removed.append(self._relative(path))

    def _count_removed(self, status) -> None:
        if stat.S_ISREG(status.st_mode) and status.st_ino not in self.cut_inodes:
            self.report.bytes_removed += status.st_size

    # --- data ---------------------------------------------------------------------

    def _cut_file(self, path: str, status) -> None:
        if status.st_ino in self.cut_inodes:
            return
        self.cut_inodes.add(status.st_ino)
        size = status.st_size
        durable = min(size, self.durable.durable_size(status.st_ino))
        unsynced = size - durable
        if not unsynced:
            return
        kept = self._kept_of_unsynced(unsynced)
        new_size = durable + kept
        if kept < unsynced:
            os.truncate(path, new_size)
        if kept and self.mode is CutMode.RANDOM and self.rng.random() < TORN_TAIL:
            self._tear(path, durable, new_size)
        self.report.bytes_cut += size - new_size
        self.report.cut_files[self._relative(path)] = (size, new_size)

    def _kept_of_unsynced(self, unsynced: int) -> int:
        """How many of a file's unsynced bytes made it: none, all, or some, equally often."""
        if self.mode is CutMode.STRICT:
            return 0
        choice = self.rng.randrange(3)
        if choice < 2:
            return (0, unsynced)[choice]
        return self.rng.randint(0, unsynced)

    def _tear(self, path: str, durable: int, end: int) -> None:
        """The last few kept bytes (never synced ones) become garbage."""
        count = self.rng.randint(1, min(MAX_GARBAGE, end - durable))
        garbage = bytes(count) if self.rng.random() < 0.5 else self.rng.randbytes(count)
        with open(path, "r+b") as f:
            f.seek(end - count)
            f.write(garbage)
        self.report.torn.append(self._relative(path))

    def _relative(self, path: str) -> str:
        return os.path.relpath(path, self.root)
