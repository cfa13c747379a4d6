"""A small program for the harness's own tests, run under the shim on a scratch tree.

``python -m tests.faults.power_cut.scratch_writer scenarios ROOT``: each scenario works
in its own directory ``ROOT/<scenario>``, which ``prepare_scenarios(ROOT)`` (called by
the test before the baseline is taken) created with whatever the scenario starts
from. What a strict power cut must leave of each is written down by the test, not
derived from the model.

``python -m tests.faults.power_cut.scratch_writer checkpoints ROOT`` replaces two
checkpoint files from two threads, as the broker's workers do.

``python -m tests.faults.power_cut.scratch_writer stress ROOT TAG`` (after
``prepare_stress(ROOT)``) syncs from several threads at once (a directory listing
longer than the shim's line buffer, files appended to while they are synced) and
prints, per file sync, its inode and the file's size just before and just after it.
"""

import os
import sys
import threading

BASELINE_FILES = {  # scenario/file -> content, durable before the program runs
    "appended/log": b"B" * 10,
    "renamed_unsynced/ckpt": b"old",
    "renamed_synced/ckpt": b"old",
    "renamed_away/a": b"a-content",
    "deleted/gone": b"gone-content",
    "truncated_after_sync/f": b"",
    "truncated_by_open/f": b"D" * 100,
}
SCENARIOS = ("appended", "created_no_directory_sync", "created_directory_synced_only", "created_and_synced",
             "subdirectory_parent_unsynced", "subdirectory_synced_in_parent", "renamed_unsynced", "renamed_synced",
             "renamed_away", "deleted", "truncated_after_sync", "truncated_by_open")
STRESS_ENTRIES = 300  # a directory listing longer than the shim's 4 KB line buffer


def prepare_scenarios(root: str) -> None:
    for scenario in SCENARIOS:
        os.makedirs(os.path.join(root, scenario), exist_ok=True)
    for name, content in BASELINE_FILES.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(content)


def prepare_stress(root: str) -> None:
    big = os.path.join(root, "stress")
    os.makedirs(big, exist_ok=True)
    for n in range(STRESS_ENTRIES):
        open(os.path.join(big, f"entry-with-a-rather-long-name-{n:04d}"), "wb").close()


def sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, *, sync: bool, more: bytes = b"") -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
        os.write(fd, more)
    finally:
        os.close(fd)


def run_scenarios(root: str) -> None:
    def at(*parts):
        return os.path.join(root, *parts)

    write_file(at("appended", "log"), b"A" * 100, sync=True, more=b"C" * 50)

    write_file(at("created_no_directory_sync", "f"), b"X" * 100, sync=True)

    write_file(at("created_directory_synced_only", "f"), b"X" * 100, sync=False)
    sync_directory(at("created_directory_synced_only"))

    write_file(at("created_and_synced", "f"), b"X" * 100, sync=True)
    sync_directory(at("created_and_synced"))
    write_file(at("created_and_synced", "f"), b"Y" * 30, sync=False)

    os.mkdir(at("subdirectory_parent_unsynced", "sub"))
    write_file(at("subdirectory_parent_unsynced", "sub", "f"), b"X" * 100, sync=True)
    sync_directory(at("subdirectory_parent_unsynced", "sub"))

    os.mkdir(at("subdirectory_synced_in_parent", "sub"))
    sync_directory(at("subdirectory_synced_in_parent"))
    write_file(at("subdirectory_synced_in_parent", "sub", "f"), b"X" * 100, sync=True)

    for scenario in ("renamed_unsynced", "renamed_synced"):  # write-tmp, fsync, rename
        write_file(at(scenario, "ckpt.tmp"), b"new", sync=True)
        os.replace(at(scenario, "ckpt.tmp"), at(scenario, "ckpt"))
    sync_directory(at("renamed_synced"))

    os.rename(at("renamed_away", "a"), at("renamed_away", "b"))

    os.unlink(at("deleted", "gone"))

    fd = os.open(at("truncated_after_sync", "f"), os.O_RDWR | os.O_APPEND)
    os.write(fd, b"Z" * 100)
    os.fdatasync(fd)
    os.ftruncate(fd, 40)
    os.write(fd, b"W" * 30)
    os.close(fd)

    fd = os.open(at("truncated_by_open", "f"), os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"E" * 10)
    os.close(fd)

    # Not recorded: a sync outside the root, and a failed sync (errno kept: EBADF).
    outside = os.open(os.path.dirname(root), os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(outside)
    os.close(outside)
    try:
        os.fsync(1 << 20)
    except OSError as exc:
        assert exc.errno == 9, exc  # EBADF
    else:
        raise AssertionError("fsync of a bad fd succeeded")


def run_stress(root: str, tag: str, threads: int = 4, rounds: int = 60) -> None:
    big = os.path.join(root, "stress")
    lock = threading.Lock()
    sizes = []

    def worker(number: int) -> None:
        path = os.path.join(big, f"{tag}-{number}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        stop = threading.Event()

        def appender():  # appends while the file is being synced
            while not stop.is_set():
                os.write(fd, b"x" * 512)

        other = threading.Thread(target=appender)
        other.start()
        try:
            for _ in range(rounds):
                sync_directory(big)
                before = os.fstat(fd).st_size
                os.fdatasync(fd)
                after = os.fstat(fd).st_size
                with lock:
                    sizes.append((os.fstat(fd).st_ino, before, after))
        finally:
            stop.set()
            other.join()
            os.close(fd)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    for inode, before, after in sizes:
        print(inode, before, after)


def run_checkpoints(root: str, rounds: int = 40) -> None:
    """Two threads replace a checkpoint file each, as the broker's workers do
    (``recovery_points.write_checkpoint``: write a temporary file, fsync, rename, fsync
    the directory), so one's directory sync makes the other's temporary name durable;
    each ends after creating its next temporary file (a cut in the middle of a write)."""
    from mpbroker.segments.recovery_points import write_checkpoint

    directory = os.path.join(root, "checkpoints")

    def worker(number: int) -> None:
        path = os.path.join(directory, f"worker{number}")
        for version in range(1, rounds + 1):
            write_checkpoint(path, {("t", number): version})

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    # Then the moment that matters, step by step: worker0's next temporary file made
    # durable by worker1's directory sync, renamed over the checkpoint, and the write
    # after it begun, when the power goes.
    path = os.path.join(directory, "worker0")
    write_file(path + ".tmp", f"0\n1\nt 0 {rounds + 1}\n".encode(), sync=True)
    sync_directory(directory)
    os.replace(path + ".tmp", path)
    write_file(path + ".tmp", b"0\n1\nt", sync=False)


def main(argv) -> int:
    command, root = argv[1], argv[2]
    if command == "scenarios":
        run_scenarios(root)
    elif command == "stress":
        run_stress(root, argv[3])
    elif command == "checkpoints":
        run_checkpoints(root)
    else:
        raise SystemExit(f"unknown command {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
