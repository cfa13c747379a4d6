"""The leader epochs of one replicated partition's log: where in the log each leader
epoch began, kept beside the segments in ``leader-epoch-checkpoint`` (Kafka's
``LeaderEpochFileCache``, with mpbroker's byte offsets).

Why: after a leadership change a follower must cut its log where it diverges from
the new leader's. Its high watermark is no such point (KIP-101: a follower that
truncated to its high watermark and then became leader lost acknowledged writes, or
kept bytes the others did not have). Instead each replica records, for each epoch,
the byte offset of the first set appended under it; a follower asks the leader where
its own latest epoch ended there (``end_offset_for``) and truncates at that offset.

The entries rise in both epoch and offset. ``assign`` records a new epoch at the log
end when a set is appended under an epoch newer than the latest (an earlier entry
that starts at the same offset held nothing and is replaced). ``truncate_from_end``
forgets the epochs that began at or past a truncation point; ``truncate_from_start``
moves the first one up to the log start after retention; ``clear`` forgets them all
(a follower that starts its log afresh at the leader's log start). The partition's
``Log`` owns its LeaderEpochs and makes each change durable (``Log.assign_epoch``,
``Log.truncate_to``, retention).

The file is Kafka's checkpoint text: a version line ``0``, a count line, then one
``<epoch> <start offset>`` line per entry. It is replaced atomically
(``durability.replace_file``); a file that does not parse is an error naming it
(``LogCorruptError``): guessing epochs could keep divergent bytes.
"""

import os
from typing import NamedTuple

from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.segments.durability import replace_file
from mpbroker.segments.naming import LEADER_EPOCH_FILE as FILE_NAME

VERSION = 0
UNDEFINED = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochs:
    def __init__(self, directory: str, entries=()):
        self.path = os.path.join(directory, FILE_NAME)
        self.entries = list(entries)

    @classmethod
    def load(cls, directory: str) -> "LeaderEpochs":
        """The partition's epochs from its file (none if there is no file)."""
        path = os.path.join(directory, FILE_NAME)
        try:
            with open(path, encoding="ascii") as file:
                text = file.read()
        except FileNotFoundError:
            return cls(directory)
        except NotADirectoryError as exc:  # the partition's path is not a directory: storage, not this file
            raise StorageError(f"cannot list partition directory {directory}: {exc.strerror}") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise LogCorruptError(f"cannot read {path}: {exc}") from exc
        return cls(directory, parse(path, text))

    @property
    def latest(self):
        """The latest EpochEntry, or None."""
        return self.entries[-1] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """A set is appended at ``start_offset`` under ``epoch``: record the epoch if it
        is newer than the latest. True if that changed the entries (write them)."""
        latest = self.latest
        if latest is not None:
            if epoch <= latest.epoch:
                return False
            if start_offset < latest.start_offset:
                raise ValueError(f"epoch {epoch} at {start_offset} starts before epoch {latest.epoch} "
                                 f"at {latest.start_offset}")
            if start_offset == latest.start_offset:
                self.entries.pop()  # that epoch began here and holds nothing
        self.entries.append(EpochEntry(epoch, start_offset))
        return True

    def end_offset_for(self, epoch: int, log_end: int) -> EpochEntry:
        """What a leader answers a follower asking where ``epoch`` ended in its log:
        ``(the largest epoch <= epoch it has, the offset where that epoch ended)`` -- the
        next epoch's start, or ``log_end`` for its latest. ``(UNDEFINED, UNDEFINED)`` when
        it has no epoch that old."""
        latest = self.latest
        if latest is None or epoch < self.entries[0].epoch:
            return EpochEntry(UNDEFINED, UNDEFINED)
        if epoch >= latest.epoch:
            return EpochEntry(latest.epoch, log_end)
        for index, entry in enumerate(self.entries):
            if entry.epoch > epoch:
                previous = self.entries[index - 1]
                return EpochEntry(previous.epoch, entry.start_offset)
        raise AssertionError("unreachable: the latest epoch is larger")

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut at ``end_offset``: forget the epochs that began at or after it."""
        kept = [entry for entry in self.entries if entry.start_offset < end_offset]
        changed = kept != self.entries
        self.entries = kept
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Retention removed the log below ``start_offset``: the epochs wholly below it go,
        and the one it falls in now starts there."""
        index = 0
        while index + 1 < len(self.entries) and self.entries[index + 1].start_offset <= start_offset:
            index += 1
        kept = self.entries[index:]
        if kept and kept[0].start_offset < start_offset:
            kept[0] = EpochEntry(kept[0].epoch, start_offset)
        changed = kept != self.entries
        self.entries = kept
        return changed

    def clear(self) -> bool:
        """Forget every epoch. True if there were any."""
        changed = bool(self.entries)
        self.entries = []
        return changed

    def write_if_missing(self) -> None:
        """Write the file (empty if no epoch began yet) unless it exists: the log is
        known as a replicated partition's from then on, also after a restart."""
        if not os.path.exists(self.path):
            self.write()

    def write(self) -> None:
        """Replace the file with the entries, durably. Blocking (two fsyncs); OSError."""
        lines = [str(VERSION), str(len(self.entries))] + [f"{e.epoch} {e.start_offset}" for e in self.entries]
        replace_file(self.path, ("\n".join(lines) + "\n").encode("ascii"))


def parse(path: str, text: str) -> list:
    """The entries of a checkpoint's text; LogCorruptError naming ``path`` when it is not one."""
    lines = text.split("\n")
    try:
        if lines[-1] != "" or int(lines[0]) != VERSION:
            raise ValueError("not version 0, or no final newline")
        count = int(lines[1])
        body = lines[2:-1]
        if count != len(body):
            raise ValueError(f"{count} entries announced, {len(body)} found")
        entries = []
        for line in body:
            epoch, offset = line.split(" ")
            entries.append(EpochEntry(int(epoch), int(offset)))
    except (ValueError, IndexError) as exc:
        raise LogCorruptError(f"{path} is not a leader-epoch checkpoint ({exc}); nothing was changed") from None
    for previous, entry in zip(entries, entries[1:]):
        if entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset:
            raise LogCorruptError(f"{path}: epochs out of order ({previous} then {entry}); nothing was changed")
    if any(entry.epoch < 0 or entry.start_offset < 0 for entry in entries):
        raise LogCorruptError(f"{path}: a negative epoch or offset; nothing was changed")
    return entries
