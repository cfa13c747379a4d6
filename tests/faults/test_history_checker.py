"""The history checker (tests/faults/netcluster/checker.py) on histories written by hand,
no brokers: a clean history passes, every kind of finding is detected, and the tricky
cases (indeterminate produces that did or did not append, retries, the weaker
durabilities, replica tails above the high watermark) are not findings. The property
over random histories from a model is in test_history_checker_model.py."""

import threading

from tests.faults.history_run import TOPIC, Run, failures, log_bytes, payloads
from tests.faults.netcluster.checker import check
from tests.faults.netcluster.checker_report import (
    ABORTED,
    DIVERGENT_READS,
    DIVERGENT_REPLICAS,
    DUPLICATED,
    LOST,
    MISSING_FINAL,
    ORDER,
)
from tests.faults.netcluster.history import History
from tests.faults.netcluster.history_records import FAILED, INDETERMINATE, OK, PENDING, classify_error


def test_a_clean_history_passes_and_prints_its_table():
    run = Run(seed=42)
    for seq in range(5):
        run.produce(1, payloads(1, seq), durability=2)
        run.produce(2, payloads(2, seq), durability=seq % 3, partition=1)
    run.read("c1")
    run.read("c2", partition=1, start=3)
    run.history.record_fault("isolate", "b1", 3.0, 5.0)
    run.history.record_fault("kill", 2, 6.0)
    report = check(run.finish(partitions=(0, 1)))
    assert report.ok, report.details()
    assert report.failures() == {}
    assert report.acknowledged == {0: 4, 1: 4, 2: 12}
    assert report.total.final_messages == 20 and report.total.reads == 17
    table = report.table()
    assert "OK" in table and "t-0" in table and "t-1" in table and "total" in table
    assert "isolate 1, kill 1" in table
    assert report.details() == "no problems"


def test_indeterminate_produces_appended_or_not_are_no_finding():
    run = Run()
    run.produce(1, payloads(1, 0), outcome=INDETERMINATE, appended=True)  # timed out, but it got in
    run.produce(1, payloads(1, 1), outcome=INDETERMINATE, appended=False)
    run.produce(1, payloads(1, 2), outcome=INDETERMINATE, appended=True, code=10)  # NOT_ENOUGH_REPLICAS after append
    run.produce(1, payloads(1, 3), outcome=INDETERMINATE, appended=True, code=9)  # demoted after append
    pending = run.history.begin_produce(1, TOPIC, 0, 2, payloads(1, 4), start=run.tick())  # never answered
    run.append(0, payloads(1, 4))
    run.produce(1, payloads(1, 5))
    run.read("c1")
    report = check(run.finish())
    assert report.ok, report.details()
    assert run.history.attempts[pending].outcome == PENDING
    assert report.outcomes == {OK: 1, INDETERMINATE: 4, PENDING: 1}


def test_error_codes_are_failed_only_for_validation():
    assert {code: classify_error(code) for code in (2, 3, 5, 6)} == dict.fromkeys((2, 3, 5, 6), FAILED)
    assert {code: classify_error(code) for code in (-1, 1, 7, 8, 9, 10, 11, 12)} == \
        dict.fromkeys((-1, 1, 7, 8, 9, 10, 11, 12), INDETERMINATE)


# --- lost ------------------------------------------------------------------------------


def test_a_durability_2_payload_missing_from_the_final_read_is_lost():
    run = Run()
    run.produce(1, payloads(1, 0))
    lost = run.produce(1, payloads(1, 1, count=1))
    run.logs[0].pop()  # the final log lost it
    report = check(run.finish())
    assert report.failures() == {LOST: 1}
    assert report.lost == {2: 1}
    assert f"attempt {lost}" in report.details() and "b'p1-1-0'" in report.details()


def test_a_durability_1_or_0_loss_is_counted_not_a_failure():
    run = Run()
    run.produce(1, payloads(1, 0))
    run.produce(1, payloads(1, 1, count=1), durability=1)
    run.produce(2, payloads(2, 0, count=1), durability=0)
    run.logs[0][2:] = []  # the tail the old leader acknowledged and the new one never had
    report = check(run.finish())
    assert report.ok, report.details()
    assert report.lost == {1: 1, 0: 1}
    assert report.total.lost[2] == 0
    assert "lost d1 (counted, not a failure)" in report.details()
    assert "1/1/0" in report.table().splitlines()[-3]  # the total row shows the losses


def test_a_partition_without_a_final_read_is_not_ok():
    run = Run()
    run.produce(1, payloads(1, 0))
    run.produce(1, payloads(1, 1), partition=1)
    report = check(run.finish(partitions=(0,)))
    assert report.failures() == {MISSING_FINAL: 1}
    assert report.missing_final_reads == [(TOPIC, 1)]


# --- divergent -------------------------------------------------------------------------


def test_two_readers_disagreeing_at_an_offset_are_divergent():
    run = Run()
    run.produce(1, payloads(1, 0, count=3))
    run.read("c1")
    offset, next_offset, _ = run.logs[0][1]
    run.history.record_read("c2", TOPIC, 0, offset, next_offset, b"p1-0-2", broker=2)  # another payload there
    run.history.record_read("c3", TOPIC, 0, offset, next_offset + 1, b"p1-0-1", broker=3)  # another next offset
    report = check(run.finish())
    assert report.failures() == {DIVERGENT_READS: 1}  # one offset
    assert f"offset {offset}: c2 read b'p1-0-2'" in report.details()


def test_readers_disagreeing_where_the_final_read_has_nothing_are_divergent():
    run = Run()
    run.produce(1, payloads(1, 0, count=3))
    report_before = check(run.finish())
    assert report_before.ok
    run.history.record_read("c1", TOPIC, 0, 5000, 5020, b"p1-0-0")
    run.history.record_read("c2", TOPIC, 0, 5000, 5020, b"p1-0-0")
    run.history.record_read("c3", TOPIC, 0, 3, 40, b"p1-0-1")  # inside a message of the final read
    report = check(run.history)
    assert report.failures() == {DIVERGENT_READS: 2}
    assert "ends at" in report.details() and "no message of the final read" in report.details()


def test_replica_logs_may_differ_above_the_high_watermark_but_not_below():
    run = Run()
    run.produce(1, payloads(1, 0, count=4))
    history = run.finish(replicas=(1,))
    data = log_bytes(run.logs[0])
    high_watermark = run.logs[0][2][1]  # the last message is not committed yet
    history.replica_logs[0].high_watermark = high_watermark
    history.record_replica_log(TOPIC, 0, 2, data[:high_watermark] + b"uncommitted tail", high_watermark)
    history.record_replica_log(TOPIC, 0, 3, data[:high_watermark], high_watermark)
    assert check(history).ok, check(history).details()

    diverged = bytearray(data)
    diverged[high_watermark - 3] ^= 0xFF
    history.record_replica_log(TOPIC, 0, 4, bytes(diverged), high_watermark)
    report = check(history)
    assert report.failures() == {DIVERGENT_REPLICAS: 3}  # broker 4 against each of the other three
    assert f"differ at byte offset {high_watermark - 3}" in report.details()


def test_a_replica_shorter_than_the_high_watermark_is_divergent():
    run = Run()
    run.produce(1, payloads(1, 0, count=4))
    history = run.finish(replicas=(1, 2))
    history.replica_logs[1].data = history.replica_logs[1].data[:-5]
    report = check(history)
    assert report.failures() == {DIVERGENT_REPLICAS: 1}
    assert "below the high watermark" in report.details() and "committed bytes missing" in report.details()


# --- duplicated --------------------------------------------------------------------------


def test_a_retried_payload_read_twice_is_an_explained_duplicate():
    run = Run()
    first = run.produce(1, payloads(1, 0), outcome=INDETERMINATE, appended=True)
    run.produce(1, payloads(1, 0), retry_of=first)  # the retry appends it again
    run.produce(1, payloads(1, 1))
    run.read("c1")
    report = check(run.finish())
    assert report.ok, report.details()
    assert (report.total.duplicated_explained, report.total.duplicated_unexplained) == (2, 0)


def test_duplicates_without_a_retry_or_beyond_the_retries_are_unexplained():
    run = Run()
    run.produce(1, payloads(1, 0, count=1))
    run.append(0, payloads(1, 0, count=1))  # appended twice by one attempt
    first = run.produce(2, payloads(2, 0, count=1), outcome=INDETERMINATE, appended=True)
    run.produce(2, payloads(2, 0, count=1), retry_of=first)
    run.append(0, payloads(2, 0, count=1))  # three copies from a chain of two attempts
    report = check(run.finish())
    assert report.failures() == {DUPLICATED: 3}  # one extra copy of p1-0-0, two of p2-0-0
    assert report.total.duplicated_explained == 0
    assert "only 2 attempt(s) of its chain" in report.details()


def test_the_same_payload_from_unrelated_attempts_is_unexplained():
    run = Run()
    run.produce(1, payloads(1, 0, count=1), outcome=INDETERMINATE, appended=True)
    run.produce(1, payloads(1, 0, count=1))  # not marked as a retry
    assert failures(run.finish()) == {DUPLICATED}


# --- order --------------------------------------------------------------------------------


def test_acknowledged_payloads_out_of_order_are_found():
    run = Run()
    run.produce(1, payloads(1, 0, count=1))
    run.produce(1, payloads(1, 1, count=1))
    run.produce(2, payloads(2, 0, count=1))
    history = run.finish()
    entries = history.final_reads[(TOPIC, 0)].entries
    (o0, n0, p0), (o1, n1, p1) = entries[:2]
    entries[:2] = [(o0, n0, p1), (o1, n1, p0)]  # same lengths: only the order changed
    report = check(history)
    assert report.failures() == {ORDER: 2}  # p1-1-0 misplaced and early, p1-0-0 misplaced
    assert "acknowledged at" in report.details()


def test_an_acknowledged_set_found_elsewhere_is_out_of_order():
    run = Run()
    first = run.produce(1, payloads(1, 0, count=1), outcome=INDETERMINATE, appended=False)
    run.produce(1, payloads(1, 0, count=1), retry_of=first)
    history = run.finish()
    attempt = history.attempts[first + 1]
    attempt.offset, attempt.next_offset = 100, 120  # acknowledged somewhere else than where it is
    assert failures(history) == {ORDER}


def test_final_read_offsets_must_increase():
    run = Run()
    run.produce(1, payloads(1, 0, count=2), durability=1)
    history = run.finish()
    entries = history.final_reads[(TOPIC, 0)].entries
    entries.reverse()
    report = check(history)
    assert report.failures() == {ORDER: 1}
    assert "must strictly increase" in report.details()


# --- aborted reads ----------------------------------------------------------------------


def test_a_failed_produce_read_is_an_aborted_read():
    run = Run()
    run.produce(1, payloads(1, 0))
    failed = run.produce(1, payloads(1, 1, count=1), outcome=FAILED, appended=True, code=5)
    run.read("c1")
    report = check(run.finish())
    assert report.failures() == {ABORTED: 1}  # read by c1 and in the final read: one payload
    assert f"every attempt that sent it failed (first: attempt {failed})" in report.details()


def test_a_failed_attempt_whose_retry_may_have_appended_is_no_aborted_read():
    run = Run()
    failed = run.produce(1, payloads(1, 0), outcome=FAILED, appended=False)
    run.produce(1, payloads(1, 0), outcome=INDETERMINATE, appended=True, retry_of=failed)
    run.read("c1")
    assert check(run.finish()).ok


def test_a_payload_nobody_sent_is_an_aborted_read():
    run = Run()
    run.produce(1, payloads(1, 0, count=1))
    run.history.record_read("c1", TOPIC, 0, 0, 17, b"p9-9-9")
    report = check(run.finish())
    assert report.failures() == {ABORTED: 1, DIVERGENT_READS: 1}
    assert "no attempt of this partition sent it" in report.details()


# --- the recorder ----------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path):
    run = Run(seed=1234)
    first = run.produce(1, payloads(1, 0), outcome=INDETERMINATE, appended=True)
    run.produce(1, payloads(1, 0), retry_of=first)
    run.produce(2, [b"\x00\xffbinary", b""], durability=0, partition=1)
    run.produce(3, payloads(3, 0), outcome=FAILED, code=6)
    run.read("c1")
    run.history.record_fetch("c2", TOPIC, 1, 0, [p for _, _, p in run.logs[1]], [n for _, n, _ in run.logs[1]],
                             broker=2, role="leader", at=run.tick())
    fault = run.history.begin_fault("partition", "b1|b2,b3", start=run.tick())
    run.history.end_fault(fault, end=run.tick())
    run.history.meta["schedule"] = "partition-leader"
    history = run.finish(partitions=(0, 1))
    history.replica_logs[0].data += b"tail"
    path = tmp_path / "history.jsonl"
    history.save(path)
    loaded = History.load(path)
    assert loaded == history
    assert check(loaded).table() == check(history).table()
    assert loaded.begin_produce(1, TOPIC, 0, 2, [b"x"]) == max(history.attempts) + 1


def test_threads_record_concurrently():
    history = History()

    def producer(number):
        for seq in range(200):
            attempt = history.begin_produce(number, TOPIC, 0, 2, payloads(number, seq, count=1))
            history.produce_error(attempt, 10)
            history.record_read(number, TOPIC, 0, seq, seq + 1, b"x")

    threads = [threading.Thread(target=producer, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(history.attempts) == list(range(1, 1601))
    assert len(history.reads) == 1600
    assert all(attempt.outcome == INDETERMINATE for attempt in history.attempts.values())


def test_a_finished_attempt_cannot_finish_again():
    history = History()
    attempt = history.begin_produce(1, TOPIC, 0, 2, [b"a"])
    history.produce_ok(attempt, 0, 15)
    try:
        history.produce_exception(attempt, "late")
    except ValueError:
        pass
    else:
        raise AssertionError("finished twice")

