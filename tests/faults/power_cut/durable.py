"""What of a directory tree is durable: the state a power cut falls back to.

Two maps, both keyed by inode (a name can be replaced by a rename; an inode's data
goes wherever its names go):

- ``listings``: directory inode -> ``{name: inode}`` as of that directory's last sync.
  A directory with no listing was never synced: none of its entries is durable.
- ``sizes``: file inode -> bytes its last sync covered, cut down by any truncation
  after it. A file with no size was never synced: nothing of its data is durable.

``of_tree`` takes everything on disk as durable (the state before the broker first
ran, or what a power cut left: what survived a cut is on the disk). ``replay`` moves
the state forward by the shim's events.
"""

import copy
import os
import stat
from dataclasses import dataclass, field

from .events import DirectorySynced, FileSynced, Truncated, Unlinked, Unsupported


@dataclass
class DurableState:
    root_inode: int
    listings: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    unlinked: set = field(default_factory=set)  # inodes whose last name went: never put back

    @classmethod
    def of_tree(cls, root: str) -> "DurableState":
        state = cls(os.lstat(root).st_ino)
        for directory, names, files in os.walk(root):
            entries = {}
            for name in names + files:
                status = os.lstat(os.path.join(directory, name))
                entries[name] = status.st_ino
                if stat.S_ISREG(status.st_mode):
                    state.sizes[status.st_ino] = status.st_size
            state.listings[os.lstat(directory).st_ino] = entries
        return state

    def copy(self) -> "DurableState":
        return copy.deepcopy(self)

    def replay(self, events) -> "DurableState":
        for event in events:
            self.apply(event)
        return self

    def apply(self, event) -> None:
        if isinstance(event, FileSynced):
            # Two syncs of one file can overlap and log in either order: the larger covers.
            self.sizes[event.inode] = max(self.sizes.get(event.inode, 0), event.size)
            self.unlinked.discard(event.inode)
        elif isinstance(event, Truncated):
            if event.inode in self.sizes:
                self.sizes[event.inode] = min(self.sizes[event.inode], event.size)
        elif isinstance(event, DirectorySynced):
            self.listings[event.inode] = dict(event.entries)
            self.unlinked.difference_update(event.entries.values())
        elif isinstance(event, Unlinked):
            if event.links_before == 1:
                # The inode is free for reuse: a new file that gets its number starts
                # with nothing durable, and a stale name of the old one is not put back.
                self.sizes.pop(event.inode, None)
                self.unlinked.add(event.inode)
        elif isinstance(event, Unsupported):
            raise UnsupportedEvent(f"the power-cut model cannot represent {event.what} of {event.path}")

    def durable_size(self, inode: int) -> int:
        return self.sizes.get(inode, 0)


class UnsupportedEvent(Exception):
    """The program did something the model does not represent (see ``shim.c``)."""
