"""The modern clients' checker (tests/faults/netcluster/modern_checker.py, folded into
``checker.check``) on histories written by hand, no brokers (and the final read's
batch headers parsed from log bytes): a clean history passes,
each rule fires on the history that breaks it, and what is only counted (acks=1
losses, duplicates and reordering without idempotence) is no failure."""

from mpbroker.records.batch import pack_batch
from tests.faults.netcluster.checker import check
from tests.faults.netcluster.history import History
from tests.faults.netcluster.history_records import FAILED, INDETERMINATE, OK
from tests.faults.netcluster.modern_checker import (
    COMMIT_AHEAD,
    COMMIT_LOST,
    GROUP_DIVERGENT,
    GROUP_SKIPPED,
    IDEMPOTENT_DUPLICATES,
    MODERN_ABORTED,
    MODERN_LOST,
    MODERN_MISSING_FINAL,
    MODERN_ORDER,
    RESENT_AFTER_BUMP,
)
from tests.faults.netcluster.modern_workload import idempotent_batches
from tests.faults.netcluster.runner import RunResult, summarize, summary_table

TOPIC = "m"
CLIENTS = {"c1": ("confluent-kafka", "all", True), "c2": ("confluent-kafka", "1", False),
           "k1": ("kafka-python", "all", True)}


class ModernRun:
    """A hand-written run: a log per partition the sends really land in, and the
    history of what the producers and the group did."""

    def __init__(self):
        self.history = History(seed=7)
        self.logs = {0: [], 1: []}  # partition -> [(offset, value)]
        self.clock = 0.0

    def tick(self) -> float:
        self.clock += 1.0
        return self.clock

    def append(self, partition: int, value: bytes) -> int:
        log = self.logs[partition]
        offset = log[-1][0] + 1 if log else 100  # offsets need not start at 0
        log.append((offset, value))
        return offset

    def send(self, producer, sequence, partition=0, outcome=OK, appended=None, acked_offset=None) -> int:
        client, acks, idempotent = CLIENTS[producer]
        value = f"{producer}-{sequence}".encode()
        send = self.history.begin_send(producer, client, acks, idempotent, TOPIC, partition, value, start=self.tick())
        appended = outcome == OK if appended is None else appended
        offset = self.append(partition, value) if appended else None
        if outcome == OK:
            self.history.send_ok(send, offset if acked_offset is None else acked_offset, end=self.tick())
        elif outcome in (FAILED, INDETERMINATE):
            self.history.send_error(send, "_MSG_TIMED_OUT", certainly_not_appended=outcome == FAILED,
                                    end=self.tick())
        return send

    def read(self, member, partition=0, start=0, stop=None, commit=True) -> None:
        """The member reads log entries [start, stop) in one poll, then commits one past them."""
        entries = self.logs[partition][start:stop]
        self.history.record_group_reads(member, TOPIC, [(partition, o, v) for o, v in entries], at=self.tick())
        if commit and entries:
            self.commit(member, partition, entries[-1][0] + 1)

    def commit(self, member, partition, offset, ok=True) -> None:
        self.history.record_commit(member, TOPIC, {partition: offset}, self.tick(), ok,
                                   None if ok else "REBALANCE_IN_PROGRESS", end=self.tick())

    def finish(self, committed=None, partitions=(0, 1), batches=()) -> History:
        """``batches``: the idempotent batches the leader stored, (base offset, records,
        producer id, epoch, base sequence)."""
        for partition in partitions:
            log = self.logs[partition]
            self.history.record_modern_final(TOPIC, partition, log, log[-1][0] + 1 if log else 0, at=self.tick(),
                                             batches=batches if partition == 0 else ())
        if committed is None:  # the highest acknowledged commit of each partition
            committed = {}
            for commit in self.history.commits:
                if commit.ok:
                    for partition, offset in commit.offsets.items():
                        committed[partition] = max(committed.get(partition, 0), offset)
        self.history.record_group_final(TOPIC, committed)
        return self.history


def clean_run() -> ModernRun:
    run = ModernRun()
    for sequence in range(6):
        for producer in CLIENTS:
            run.send(producer, sequence, partition=sequence % 2)
    run.read("g1", 0, 0, 4)
    run.read("g2", 1, 0, 9)
    run.read("g1", 0, 4)
    return run


def failures(history) -> dict:
    return check(history).failures()


def test_a_clean_history_passes_and_shows_its_rows():
    report = check(clean_run().finish())
    assert report.ok, report.details()
    table = report.table()
    assert "modern clients: 18 sends (ok 18)" in table
    assert "confluent-kafka acks=all idempotent" in table and "kafka-python acks=all idempotent" in table
    assert report.modern.by_label() == {
        "confluent-kafka acks=1": {"acknowledged": 6, "lost": 0, "duplicates": 0, "resent": 0},
        "confluent-kafka acks=all idempotent": {"acknowledged": 6, "lost": 0, "duplicates": 0, "resent": 0},
        "kafka-python acks=all idempotent": {"acknowledged": 6, "lost": 0, "duplicates": 0, "resent": 0}}


def test_a_history_without_modern_clients_has_no_modern_report():
    assert check(History(seed=1)).modern is None


def test_an_acks_all_value_missing_is_lost_an_acks_1_one_only_counted():
    run = ModernRun()
    for sequence in range(4):
        for producer in CLIENTS:
            run.send(producer, sequence, partition=sequence % 2)
    run.logs[1] = [(o, v) for o, v in run.logs[1] if v not in (b"c1-1", b"c2-3")]  # the new leader lacks them
    report = check(run.finish(committed={}))
    assert report.failures() == {MODERN_LOST: 1}
    assert "b'c1-1' of c1" in report.details()
    assert report.modern.by_label()["confluent-kafka acks=1"]["lost"] == 1
    assert "modern acks=1 lost (counted, not a failure)" in report.details()


def test_indeterminate_sends_appended_or_not_are_no_finding():
    run = clean_run()
    run.send("c1", 6, outcome=INDETERMINATE, appended=True)
    run.send("c1", 8, outcome=INDETERMINATE, appended=False)
    run.send("k1", 6, outcome=FAILED)
    assert check(run.finish()).ok


def test_an_idempotent_duplicate_is_a_failure_a_plain_one_counted():
    run = clean_run()
    run.append(0, b"k1-2")  # stored again by a retry
    run.append(0, b"c2-4")
    report = check(run.finish())
    assert report.failures() == {IDEMPOTENT_DUPLICATES: 1}
    assert report.modern.by_label()["kafka-python acks=all idempotent"]["duplicates"] == 1
    assert report.modern.by_label()["confluent-kafka acks=1"]["duplicates"] == 1
    assert "duplicates without idempotence (counted, not a failure)" in report.details()


def test_an_idempotent_duplicate_is_told_apart_by_the_epochs_stored():
    def run_with(second_epoch):
        run = ModernRun()
        first = run.send("c1", 0)
        run.send("c1", 2)
        again = run.append(0, b"c1-0")  # sent again by the client
        return run.finish(committed={}, partitions=(0,), batches=[
            (run.history.sends[first].offset, 2, 7, 0, 10), (again, 1, 7, second_epoch, 0 if second_epoch else 10)])

    same = check(run_with(0))
    assert same.failures() == {IDEMPOTENT_DUPLICATES: 1}
    assert "stored as producer 7 epoch 0 sequence 10, producer 7 epoch 0 sequence 10" in same.details()
    bumped = check(run_with(1))  # the client's doing (librdkafka issue 4953): counted
    assert bumped.ok
    assert f"{RESENT_AFTER_BUMP}:\n" in bumped.details()
    assert "producer 7 epoch 0 sequence 10, producer 7 epoch 1 sequence 0" in bumped.details()
    assert bumped.modern.by_label()["confluent-kafka acks=all idempotent"] == {
        "acknowledged": 2, "lost": 0, "duplicates": 1, "resent": 1}


def test_the_idempotent_batches_are_read_from_the_log_bytes():
    log = b"".join([pack_batch(b"", 2, base_offset=100, producer_id=7, producer_epoch=1, base_sequence=5),
                    pack_batch(b"", 1, base_offset=150),  # no producer id: left out
                    pack_batch(b"", 3, base_offset=200, producer_id=8, producer_epoch=0, base_sequence=0),
                    pack_batch(b"", 1, base_offset=260, producer_id=8, producer_epoch=0, base_sequence=3)])
    assert idempotent_batches(log, 260) == [(100, 2, 7, 1, 5), (200, 3, 8, 0, 0)]


def test_a_value_not_at_the_offset_its_ack_named_is_an_order_failure():
    run = clean_run()
    run.send("c2", 6, acked_offset=99)
    report = check(run.finish())
    assert report.failures() == {MODERN_ORDER: 1}
    assert "acknowledged at offset 99" in report.details()


def test_a_value_acknowledged_without_an_offset_is_placed_by_the_final_read(tmp_path):
    """librdkafka reports some deliveries of an idempotent producer with no offset
    (``Message.offset()`` None; seed 733311445 of the long run, whose delivery report
    raised on it): stored, counted and noted; its order is its copy's place; lost if the
    final read lacks it."""
    run = clean_run()
    client, acks, idempotent = CLIENTS["c1"]
    for sequence, stored in ((6, True), (7, False)):
        value = f"c1-{sequence}".encode()
        send = run.history.begin_send("c1", client, acks, idempotent, TOPIC, 0, value, start=run.tick())
        if stored:
            run.append(0, value)
        run.history.send_ok(send, None, end=run.tick())
    path = tmp_path / "history.jsonl"
    run.finish().save(path)
    report = check(History.load(path))
    assert report.failures() == {MODERN_LOST: 1}
    assert "b'c1-7' of c1" in report.details()
    assert "modern acknowledged without an offset (counted, not a failure)" in report.details()
    assert report.modern.producers["c1"].order_violations == 0


def test_reordering_is_a_failure_with_idempotence_counted_without():
    run = ModernRun()
    for producer in ("c1", "c2"):
        client, acks, idempotent = CLIENTS[producer]
        first = run.history.begin_send(producer, client, acks, idempotent, TOPIC, 0, f"{producer}-0".encode(),
                                       start=run.tick())
        run.send(producer, 1)
        run.history.send_ok(first, run.append(0, f"{producer}-0".encode()), end=run.tick())  # stored after it
    report = check(run.finish(committed={}))
    assert report.failures() == {MODERN_ORDER: 1}
    assert "b'c1-1' of c1 at offset" in report.details()
    assert "reordered without idempotence (counted, not a failure)" in report.details()
    assert report.modern.producers["c2"].order_violations == 1


def test_a_value_no_send_may_have_appended_is_an_aborted_read():
    run = clean_run()
    run.send("c1", 6, outcome=FAILED)
    run.append(0, b"c1-6")  # refused before it was queued, yet in the log
    run.append(1, b"x-1")  # nobody sent it
    report = check(run.finish())
    assert report.failures() == {MODERN_ABORTED: 2}


def test_a_group_read_the_final_read_does_not_hold_is_divergent():
    run = clean_run()
    run.history.record_group_reads("g2", TOPIC, [(1, 101, b"k1-1")], at=run.tick())  # the log has c2-1 there
    assert failures(run.finish()) == {GROUP_DIVERGENT: 1}


def test_a_commit_ahead_of_what_the_group_read_is_found():
    run = clean_run()
    run.commit("g2", 1, 200, ok=False)  # nobody read partition 1 beyond offset 108; refused, but sent
    assert failures(run.finish()) == {COMMIT_AHEAD: 1}


def test_a_committed_offset_after_the_run_ahead_of_the_reads_is_found():
    run = clean_run()
    assert failures(run.finish(committed={0: 109, 1: 150})) == {COMMIT_AHEAD: 1}


def test_an_acknowledged_commit_lost_is_found():
    run = clean_run()
    report = check(run.finish(committed={0: 104, 1: 109}))  # g1's commit of 109 was acknowledged
    assert report.failures() == {COMMIT_LOST: 1}
    assert "m-0: g1's commit of 109 was acknowledged, committed after the run: 104" in report.details()


def test_a_failed_commit_may_be_lost():
    run = ModernRun()
    for sequence in range(3):
        run.send("c1", sequence)
    run.read("g1", 0, 0, 2)
    run.read("g1", 0, 2, commit=False)
    run.commit("g1", 0, 103, ok=False)
    assert check(run.finish(committed={0: 102}, partitions=(0,))).ok


def test_records_below_the_committed_offset_nobody_read_are_skipped():
    run = ModernRun()
    for sequence in range(5):
        run.send("c1", sequence)
    run.read("g1", 0, 0, 2)
    run.history.record_group_reads("g1", TOPIC, [(0, 104, b"c1-4")], at=run.tick())
    run.commit("g1", 0, 105)
    report = check(run.finish(partitions=(0,)))
    assert report.failures() == {GROUP_SKIPPED: 2}
    assert "offsets [102, 103]" in report.details()


def test_a_partition_sent_to_without_a_final_read_is_not_ok():
    run = clean_run()
    assert MODERN_MISSING_FINAL in failures(run.finish(partitions=(0,)))


def test_save_and_load_round_trip(tmp_path):
    run = clean_run()
    run.send("c1", 6, outcome=INDETERMINATE, appended=True)
    run.send("k1", 6, outcome=FAILED)
    run.commit("g2", 1, 109, ok=False)
    history = run.finish()
    path = tmp_path / "history.jsonl"
    history.save(path)
    loaded = History.load(path)
    assert loaded == history
    assert check(loaded).table() == check(history).table()
    assert loaded.begin_send("c1", "confluent-kafka", "all", True, TOPIC, 0, b"x") == max(history.sends) + 1


def test_a_version_1_history_still_loads(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"type":"header","version":1,"seed":5,"meta":{}}\n'
                    '{"type":"fault","id":1,"kind":"kill","target":2,"start":1.0,"end":2.0}\n')
    loaded = History.load(path)
    assert loaded.seed == 5 and len(loaded.faults) == 1 and loaded.sends == {}
    assert check(loaded).ok


def test_the_runners_summary_carries_the_modern_rows():
    clean = check(clean_run().finish())
    lossy = ModernRun()
    lossy.send("c2", 0)
    lossy.send("c1", 1)
    lossy.logs[0] = [(100, b"c2-0"), (101, b"c2-0"), (102, b"c1-1")]  # one plain duplicate
    results = [RunResult(1, [], report=clean), RunResult(2, [], report=check(lossy.finish(committed={})))]
    summary = summarize(results)
    assert summary["modern"]["confluent-kafka acks=1"] == {"acknowledged": 7, "lost": 0, "duplicates": 1, "resent": 0}
    assert summary["modern"]["kafka-python acks=all idempotent"] == {"acknowledged": 6, "lost": 0, "duplicates": 0, "resent": 0}
    table = summary_table(summary, base_seed=3)
    assert "| confluent-kafka acks=1 | 7 | 0 | 1 (0) |" in table
    assert "| confluent-kafka acks=all idempotent | 7 | 0 | 0 (0) |" in table
