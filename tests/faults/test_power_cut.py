"""Power cuts under load (tests/faults/power_cut/ holds the shim and the model).

A SIGKILL keeps the page cache; a power cut loses every byte and directory entry no
fsync/fdatasync covered. The broker runs with a recording shim preloaded (which also
makes each sync 20 ms slower, a disk like this VM's); at random moments under load its
whole process tree is SIGKILLed, the model turns ``log.dir`` into what a power cut at
that moment would leave (``strict``: nothing unsynced survives; ``random``: some
unsynced tails, torn sectors and entries survive, as on a real disk), and the broker
is started again under the shim.

Guarantees checked: every restart succeeds, and every message acknowledged with
durability "flush" (PRODUCE_ACKED durability 1) is read back at the end; every log is
valid. Fire-and-forget produces run beside the acknowledged ones, so segments roll
between flushes.

    MPBROKER_POWER_CUT_SEED=7 MPBROKER_POWER_CUT_CYCLES=200 pytest -s tests/faults/test_power_cut.py
    MPBROKER_POWER_CUT_MODES=strict ...   (or random; both by default)

The seed is printed before anything runs, and a failure names it. It replays the
choices (modes, waits, each cut's random draws), not the timing, so a replay cuts at
similar, not identical, points. The first tests check the harness itself: what
survives a cut of a scratch tree is exactly what the model promises, written down
here rather than derived from the model.
"""

import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from tests.broker.harness import BrokerProcess
from tests.broker.load import AckedLoad, read_everything
from tests.broker.test_faults import all_flushed, assert_logs_valid
from tests.faults.power_cut import CutMode, PowerCutRig, UnsupportedEvent
from tests.faults.power_cut.events import DirectorySynced, FileSynced, read_events
from tests.faults.power_cut.fire_and_forget import FireAndForgetLoad
from tests.faults.power_cut.model import MAX_GARBAGE
from tests.faults.power_cut.scratch_writer import STRESS_ENTRIES, prepare_scenarios, prepare_stress

SEED = int(os.environ.get("MPBROKER_POWER_CUT_SEED") or random.randrange(1 << 30))
CYCLES = int(os.environ.get("MPBROKER_POWER_CUT_CYCLES", "40"))  # about 45 s
MODES = os.environ.get("MPBROKER_POWER_CUT_MODES", "strict,random")  # which cut modes the cycles use
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRECTORY = "<directory>"


def run_under_shim(rig, *arguments) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.power_cut.scratch_writer", *arguments],
        env={**os.environ, **rig.environment()}, cwd=REPOSITORY, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def tree_contents(root) -> dict:
    """relative path -> file bytes, or DIRECTORY."""
    found = {}
    for directory, names, files in os.walk(root):
        for name in names:
            found[os.path.relpath(os.path.join(directory, name), root)] = DIRECTORY
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                found[os.path.relpath(os.path.join(directory, name), root)] = f.read()
    return found


# --- the harness: shim and model on a scratch tree ------------------------------------------

# What a strict cut must leave of scratch_writer's scenarios (read it beside this).
STRICT_SURVIVORS = {
    "appended": DIRECTORY,
    "appended/log": b"B" * 10 + b"A" * 100,  # the durable start and the synced append, not the rest
    "created_no_directory_sync": DIRECTORY,  # the synced file's name was never made durable
    "created_directory_synced_only": DIRECTORY,
    "created_directory_synced_only/f": b"",  # a durable name, no synced data
    "created_and_synced": DIRECTORY,
    "created_and_synced/f": b"X" * 100,
    "subdirectory_parent_unsynced": DIRECTORY,  # the synced subdirectory is lost with its parent entry
    "subdirectory_synced_in_parent": DIRECTORY,
    "subdirectory_synced_in_parent/sub": DIRECTORY,  # never synced itself: empty
    "renamed_unsynced": DIRECTORY,
    "renamed_unsynced/ckpt": b"old",  # the rename over it was not made durable
    "renamed_synced": DIRECTORY,
    "renamed_synced/ckpt": b"new",
    "renamed_away": DIRECTORY,
    "renamed_away/a": b"a-content",  # the rename away was not made durable
    "deleted": DIRECTORY,  # (an unsynced unlink: really the file would come back; not modelled)
    "truncated_after_sync": DIRECTORY,
    "truncated_after_sync/f": b"Z" * 40,  # synced at 100, truncated to 40, then 30 unsynced bytes
    "truncated_by_open": DIRECTORY,
    "truncated_by_open/f": b"",  # O_TRUNC after the durable 100 bytes
}
UNSYNCED_TAIL_BYTES = 50 + 30 + 30 + 10 + 100  # appended, created_and_synced, the two truncated, synced_only


def scratch_rig(tmp_path, shim_library, name: str = "scratch") -> PowerCutRig:
    root = tmp_path / name
    root.mkdir()
    prepare_scenarios(str(root))
    return PowerCutRig(str(root), str(tmp_path / f"{name}-rig"), shim_library)


def test_strict_cut_leaves_exactly_what_was_synced(tmp_path, shim_library):
    rig = scratch_rig(tmp_path, shim_library)
    run_under_shim(rig, "scenarios", rig.root)

    log = read_events(rig.events_path)
    assert not log.unparsed
    assert log.events and all(getattr(event, "path", getattr(event, "target", "")).startswith(rig.root + "/")
                              for event in log.events), "an event outside the root, or none at all"
    report = rig.cut(CutMode.STRICT, random.Random(0))

    assert tree_contents(rig.root) == STRICT_SURVIVORS
    assert report.bytes_cut == UNSYNCED_TAIL_BYTES
    assert sorted(report.removed) == ["created_no_directory_sync/f", "renamed_away/b",
                                      "subdirectory_parent_unsynced/sub", "subdirectory_synced_in_parent/sub/f"]
    assert sorted(report.restored) == ["renamed_away/a", "renamed_unsynced/ckpt"]
    assert report.deleted_names == ["deleted/gone"] and not report.kept_unsynced and not report.torn

    # What a cut leaves is durable: a second cut with nothing written in between changes nothing.
    again = rig.cut(CutMode.STRICT, random.Random(0))
    assert tree_contents(rig.root) == STRICT_SURVIVORS and again.bytes_dropped == 0


def torn_prefix(data: bytes, written: bytes, durable: int) -> bool:
    """``data`` is ``written`` cut short, any difference in its last few bytes past ``durable``."""
    if len(data) > len(written) or len(data) < durable:
        return False
    differ = [i for i in range(len(data)) if data[i] != written[i]]
    return not differ or (differ[0] >= durable and differ[0] >= len(data) - MAX_GARBAGE)


# In random mode an entry no sync covered may survive; then so does its synced data.
SYNCED_IF_KEPT = {"created_no_directory_sync/f": 100, "renamed_unsynced/ckpt": 3, "renamed_away/b": 9,
                  "subdirectory_parent_unsynced/sub/f": 100, "subdirectory_synced_in_parent/sub/f": 100}
RENAMED_AWAY = {"renamed_away/a": "renamed_away/b"}  # the old name is gone only if the new one survived


def test_random_cut_keeps_prefixes_of_what_was_written(tmp_path, shim_library):
    seen = {"kept unsynced": 0, "torn": 0, "partial tail": 0}
    for seed in range(6):
        rig = scratch_rig(tmp_path, shim_library, f"scratch-{seed}")
        run_under_shim(rig, "scenarios", rig.root)
        written = tree_contents(rig.root)
        report = rig.cut(CutMode.RANDOM, random.Random(seed))
        survived = tree_contents(rig.root)

        def kept_unsynced(path, kept_entries=tuple(report.kept_unsynced)):
            return any(path == kept or path.startswith(kept + "/") for kept in kept_entries)

        for path, expected in STRICT_SURVIVORS.items():  # what a strict cut keeps, a random one keeps
            if path in RENAMED_AWAY and kept_unsynced(RENAMED_AWAY[path]):
                assert path not in survived, f"seed {seed}: {path} and {RENAMED_AWAY[path]} both survived"
                continue
            assert path in survived, f"seed {seed}: {path} lost"
            if expected is DIRECTORY or kept_unsynced(path):
                continue
            if path in report.restored:
                assert survived[path] == expected, f"seed {seed}: {path}"
            else:
                assert torn_prefix(survived[path], written[path], len(expected)), f"seed {seed}: {path}"
        for path, data in survived.items():  # and whatever else survived had been written
            assert path in STRICT_SURVIVORS or kept_unsynced(path), f"seed {seed}: {path} should be gone"
            if data is not DIRECTORY and kept_unsynced(path):
                assert torn_prefix(data, written[path], SYNCED_IF_KEPT.get(path, 0)), f"seed {seed}: {path}"
        seen["kept unsynced"] += len(report.kept_unsynced)
        seen["torn"] += len(report.torn)
        seen["partial tail"] += sum(0 < after < before for before, after in report.cut_files.values())
    assert all(seen.values()), f"random mode was not exercised: {seen}"


def test_a_replaced_checkpoint_survives_as_one_whole_version(tmp_path, shim_library):
    """The broker's checkpoint files, replaced over and over from two threads, then cut
    at random: each name comes back as one whole version (never empty, never torn), and
    no inode ends up under two names (a rename is one journal transaction: the model
    once gave a renamed file its old name back as well, and the next write through that
    name truncated the checkpoint)."""
    from mpbroker.segments.recovery_points import read_checkpoint, write_checkpoint

    for seed in range(12):
        root = tmp_path / f"checkpoints-{seed}"
        (root / "checkpoints").mkdir(parents=True)
        for number in range(2):
            write_checkpoint(str(root / "checkpoints" / f"worker{number}"), {("t", number): 0})
        rig = PowerCutRig(str(root), str(tmp_path / f"checkpoints-{seed}-rig"), shim_library)
        run_under_shim(rig, "checkpoints", rig.root)
        rig.cut(CutMode.RANDOM, random.Random(seed))
        inodes = [os.lstat(os.path.join(directory, name)).st_ino
                  for directory, _, files in os.walk(root) for name in files]
        assert len(inodes) == len(set(inodes)), f"seed {seed}: an inode under two names"
        for number in range(2):
            points = read_checkpoint(str(root / "checkpoints" / f"worker{number}"))
            assert points is not None and set(points) == {("t", number)}, f"seed {seed}: {points}"


def test_concurrent_processes_and_threads_log_whole_lines(tmp_path, shim_library):
    """Two processes of four threads sync a directory with a listing longer than the
    shim's line buffer and files being appended to meanwhile: every line is whole, every
    listing complete, every recorded size taken before its sync returned."""
    root = tmp_path / "stress"
    root.mkdir()
    prepare_stress(str(root))
    rig = PowerCutRig(str(root), str(tmp_path / "stress-rig"), shim_library)
    command = [sys.executable, "-m", "tests.faults.power_cut.scratch_writer", "stress", rig.root]
    environment = {**os.environ, **rig.environment()}
    writers = [subprocess.Popen(command + [f"p{n}"], env=environment, cwd=REPOSITORY, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for n in range(2)]
    outputs = [writer.communicate(timeout=120) for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], [error for _, error in outputs]

    log = read_events(rig.events_path)
    assert not log.unparsed
    listings = [event for event in log.events if isinstance(event, DirectorySynced)]
    file_syncs = [event for event in log.events if isinstance(event, FileSynced)]
    assert len(listings) == len(file_syncs) == 2 * 4 * 60
    expected_names = {f"entry-with-a-rather-long-name-{n:04d}" for n in range(STRESS_ENTRIES)}
    assert all(expected_names <= set(event.entries) for event in listings)
    bounds = {}  # inode -> [(size before, size after)] in the order of the syncs
    for output, _ in outputs:
        for line in output.split("\n"):
            if line:
                inode, before, after = map(int, line.split())
                bounds.setdefault(inode, []).append((before, after))
    recorded = {}
    for event in file_syncs:
        recorded.setdefault(event.inode, []).append(event.size)
    assert recorded.keys() == bounds.keys()
    for inode, sizes in recorded.items():
        assert all(before <= size <= after for size, (before, after) in zip(sizes, bounds[inode])), inode


def test_what_the_model_cannot_represent_is_refused(tmp_path, shim_library):
    root = tmp_path / "unsupported"
    root.mkdir()
    rig = PowerCutRig(str(root), str(tmp_path / "unsupported-rig"), shim_library)
    program = f"import os; os.close(os.open({os.path.join(rig.root, 'f')!r}, os.O_WRONLY | os.O_CREAT | os.O_SYNC))"
    subprocess.run([sys.executable, "-c", program], env={**os.environ, **rig.environment()}, check=True)
    with pytest.raises(UnsupportedEvent, match="O_SYNC"):
        rig.cut(CutMode.STRICT, random.Random(0))


# --- the broker under power cuts ----------------------------------------------------------

TOPIC = "cuts"
PARTITIONS = 4
BROKER_PROPERTIES = {
    "num_workers": 2,
    "num_partitions": PARTITIONS,
    "log_file_size": 65536,  # rolls between flushes
    "log_default_flush_interval_ms": 50,
    "log_default_flush_scheduler_interval_ms": 50,
    "log_flush_offset_checkpoint_interval_ms": 200,
}
SYNC_DELAY_US = 20_000  # fdatasync measured 34 ms on this VM's disk (ARCHITECTURE.md); tmp dirs sync faster
ACKS_BEFORE_CUT = 5  # acknowledged requests since the restart before the random wait starts
MAX_WAIT_S = 1.0  # the cut comes up to this long after that


@dataclass
class Cycle:
    number: int
    mode: CutMode
    waited_s: float
    flush_acked: set  # every message acknowledged with durability flush before the cut
    report: object  # the model's CutReport
    restart_s: float | None = None  # None: the broker did not start again


def cut_modes(rng, cycles: int) -> list:
    """The MODES equally often (with a remainder, any of them), in a random order."""
    chosen = [CutMode(mode.strip()) for mode in MODES.split(",")]
    modes = chosen * -(-cycles // len(chosen))
    rng.shuffle(modes)
    return modes[:cycles]


def flush_acked(load: AckedLoad) -> set:
    with load._lock:
        return set(load.acked_by_durability[1])


def cut_and_restart(number, mode, rng, broker, rig, load) -> tuple:
    """Cut the power under load and start the broker again: ``(cycle, restarted)``."""
    load.wait_for_acks(load.acked_requests + ACKS_BEFORE_CUT, timeout=60)
    waited = rng.uniform(0, MAX_WAIT_S)
    time.sleep(waited)
    broker.kill_tree()
    cycle = Cycle(number, mode, waited, flush_acked(load), rig.cut(mode, random.Random(rng.randrange(1 << 30))))
    started = time.monotonic()
    try:
        broker.start()
    except RuntimeError:  # it exited (refused) or never became ready
        return cycle, False
    cycle.restart_s = time.monotonic() - started
    return cycle, True


def run_power_cuts(broker, rig, load, rng) -> tuple:
    """CYCLES cuts, or fewer if the broker refused to start: ``(cycles, every restart worked)``."""
    cycles = []
    for number, mode in enumerate(cut_modes(rng, CYCLES), 1):
        cycle, restarted = cut_and_restart(number, mode, rng, broker, rig, load)
        cycles.append(cycle)
        if not restarted:
            return cycles, False
    load.wait_for_acks(load.acked_requests + ACKS_BEFORE_CUT, timeout=60)  # the last run under load too
    return cycles, True


def cycle_table(cycles, lost_by_cycle=None) -> str:
    header = ("| cycle | mode | waited | flush-acked before the cut | lost | bytes dropped | entries removed "
              "| kept unsynced | restored | torn | restart |")
    rows = [header, "|---" * 11 + "|"]
    for cycle in cycles:
        lost = "?" if lost_by_cycle is None else lost_by_cycle[cycle.number]
        report = cycle.report
        rows.append(f"| {cycle.number} | {cycle.mode} | {cycle.waited_s:.2f} s | {len(cycle.flush_acked)} | {lost} "
                    f"| {report.bytes_dropped} | {len(report.removed)} | {len(report.kept_unsynced)} "
                    f"| {len(report.restored)} | {len(report.torn)} "
                    f"| {'refused' if cycle.restart_s is None else f'{cycle.restart_s:.1f} s'} |")
    return "\n".join(rows)


def losses_by_cycle(cycles, acked_at_end: set, stored: set) -> dict:
    """Flush-acknowledged messages missing at the end, counted at the first cut after their ack."""
    lost, before = {}, set()
    for cycle in cycles:
        lost[cycle.number] = len((cycle.flush_acked - before) - stored)
        before = cycle.flush_acked
    lost["after the last cut"] = len((acked_at_end - before) - stored)
    return lost


def fail_with_refusal(broker, cycles) -> None:
    last = cycles[-1]
    output = broker.output()
    since_start = output.split("mpbroker 0 starting")[-1]
    critical = "\n".join(line for line in since_start.splitlines() if "CRITICAL" in line) or "(no CRITICAL line)"
    pytest.fail(f"seed {SEED}: the broker refused to start after power cut {last.number} ({last.mode}):\n"
                f"{critical}\nthe cut: {last.report.summary()}\n\n{cycle_table(cycles)}\n\n"
                f"broker output since the last start:\n{since_start}", pytrace=False)


@pytest.mark.timeout(max(300, 5 * CYCLES))  # about 1 s a cycle
def test_power_cuts_under_load_lose_nothing_flushed(tmp_path, shim_library, capsys):
    with capsys.disabled():  # before anything runs, so that a hang or a crash can be replayed
        print(f"\npower cuts: {CYCLES} with MPBROKER_POWER_CUT_SEED={SEED} MPBROKER_POWER_CUT_MODES={MODES}",
              flush=True)
    rng = random.Random(SEED)
    rig = PowerCutRig(str(tmp_path / "broker" / "logs"), str(tmp_path / "power-cut"), shim_library,
                      sync_delay_us=SYNC_DELAY_US)
    broker = BrokerProcess(tmp_path / "broker", env=rig.environment(), **BROKER_PROPERTIES)
    assert os.path.realpath(broker.log_dir) == rig.root
    load = AckedLoad(lambda: broker.port, TOPIC, PARTITIONS, threads=3, requests=None, batch=5, durability=1,
                     retry_for_s=90)
    fire_and_forget = FireAndForgetLoad(lambda: broker.port, TOPIC, PARTITIONS, seed=rng.randrange(1 << 30),
                                        messages=10, payload_bytes=1000, pause_s=0.005)
    try:
        broker.start()
        load.start()
        fire_and_forget.start()
        try:
            cycles, restarted = run_power_cuts(broker, rig, load, rng)
        finally:
            load.stop()
            fire_and_forget.stop()
        if not restarted:
            fail_with_refusal(broker, cycles)
        load.join(timeout=120)
        fire_and_forget.join()
        broker.wait_until(all_flushed, what="every appended byte flushed")
        stored = set(read_everything(broker.port, TOPIC, PARTITIONS))
        assert broker.stop() == 0
    finally:
        broker.close()
    assert_logs_valid(broker.log_dir)

    acked_at_end = flush_acked(load)
    lost = acked_at_end - stored
    lost_by_cycle = losses_by_cycle(cycles, acked_at_end, stored)
    print(f"seed {SEED}: {len(cycles)} power cuts, {len(acked_at_end)} messages acknowledged with durability "
          f"flush, {len(lost)} lost ({lost_by_cycle['after the last cut']} of them after the last cut); "
          f"{fire_and_forget.sent_requests} fire-and-forget requests; model dropped "
          f"{sum(cycle.report.bytes_dropped for cycle in cycles)} bytes; "
          f"{rig.unparsed_lines} event lines cut short by the kills")
    print(cycle_table(cycles, lost_by_cycle))
    assert not lost, (f"seed {SEED}: {len(lost)} flush-acknowledged messages lost, e.g. {sorted(lost)[:3]}; "
                      f"per cut: {lost_by_cycle}")
    shutil.rmtree(rig.root)  # a few hundred MB; kept when the test fails, for a post-mortem
