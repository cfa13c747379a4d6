"""The loader's state next to its output, under ``<output>/_mpbroker/`` (Spark and
Parquet readers skip directories starting with ``_``):

    loader.lock              flock: one load at a time
    state.json               committed offsets, and the load whose files are being moved
    staging/<load id>/       a load's Spark output before it is committed
    loads/<load id>.json     each committed load's summary

``state.json`` is replaced atomically (write, fsync, rename, fsync of the directory):
its rename is the commit point of a load. It holds the offsets every partition's next
load starts at and, until the files are in place, ``moving``: the staged directories
of the committed load and where they go. A load that dies before the rename leaves
the previous state (its staging directory is removed by the next load); one that dies
after it has its moves finished by the next load. Either way no message is lost or
written twice.
"""

import errno
import fcntl
import json
import os
import shutil

from mpbroker.segments.durability import replace_file, sync_directory

STATE_DIR = "_mpbroker"


def source_starting_offsets(output_dir: str) -> str:
    """The committed offsets of the loads into ``output_dir`` as the ``startingOffsets``
    JSON of the ``mpbroker`` Spark source (``{topic: {node: offset}}``: the same node
    names), for a streaming query that takes over where the loader stopped."""
    offsets = {}
    for key, offset in sorted(LoaderState(output_dir).read()["offsets"].items()):
        topic, _, node = key.rpartition("/")
        offsets.setdefault(topic, {})[node] = offset
    return json.dumps(offsets)


class LoadLockedError(Exception):
    """Another load holds the lock."""


class LoaderState:
    def __init__(self, output_dir: str):
        self.output_dir = os.path.abspath(output_dir)
        self.dir = os.path.join(self.output_dir, STATE_DIR)
        self.path = os.path.join(self.dir, "state.json")
        self.staging_root = os.path.join(self.dir, "staging")
        self.loads_dir = os.path.join(self.dir, "loads")
        self._lock_fd = None

    # --- the lock ---------------------------------------------------------------

    def lock(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, "loader.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LoadLockedError(f"another load is running on {self.output_dir} (pid {holder}); "
                                      "this one exits without loading") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- state ------------------------------------------------------------------

    def read(self) -> dict:
        try:
            with open(self.path) as f:
                state = json.load(f)
        except FileNotFoundError:
            return {"offsets": {}, "moving": None, "last_load": None}
        if not isinstance(state.get("offsets"), dict):
            raise ValueError(f"{self.path} is damaged: no offsets")
        return state

    def write(self, state: dict) -> None:
        os.makedirs(self.dir, exist_ok=True)
        replace_file(self.path, json.dumps(state, indent=1, sort_keys=True).encode())

    def staging(self, load_id: str) -> str:
        return os.path.join(self.staging_root, load_id)

    def recover(self) -> list:
        """Finish the moves of a committed load and remove the staging directories of
        loads that never committed; returns what was done, for the log."""
        done = []
        state = self.read()
        moving = state.get("moving")
        if moving:
            self.finish_moves(moving["moves"])
            done.append(f"finished moving the files of committed load {moving['load_id']}")
            state["moving"] = None
            self.write(state)
            shutil.rmtree(self.staging(moving["load_id"]), ignore_errors=True)
        if os.path.isdir(self.staging_root):
            for name in sorted(os.listdir(self.staging_root)):
                shutil.rmtree(os.path.join(self.staging_root, name), ignore_errors=True)
                done.append(f"removed the output of load {name}, which did not commit")
        return done

    def finish_moves(self, moves: list) -> None:
        """Rename each staged directory into place; a move already done is skipped."""
        for source, target in moves:
            if os.path.exists(target):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source, target)
            sync_directory(os.path.dirname(target))

    @staticmethod
    def sync_dirs(directories) -> None:
        for directory in sorted(directories):
            sync_directory(directory)

    def write_summary(self, load_id: str, summary: dict) -> str:
        os.makedirs(self.loads_dir, exist_ok=True)
        path = os.path.join(self.loads_dir, f"{load_id}.json")
        with open(path, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
        return path

