"""rejoin_times on broker logs written here: a restarted follower's span from its first
"following" line to the ISR written with it, the registrar-to-worker span of an ISR
change, and spans a clock step broke counted apart."""

from tests.faults.netcluster.rejoin_times import Spans, main, run_spans

FOLLOW = "{t} worker 0[{pid}] INFO mpbroker.workers.replication: nemesis-0: following broker 1 (10.0.0.1:9092) at epoch {e}"
WRITE = "{t} registrar[9] INFO mpbroker.registrar.replica_roles: nemesis-0: ISR [{old}] -> [{new}] (leader epoch {e})"
APPLY = "{t} worker 0[50] INFO mpbroker.workers.replication: nemesis-0: ISR [{old}] -> [{new}]"


def write_run(directory, b1_lines, b2_lines):
    for broker, lines in (("b1", b1_lines), ("b2", b2_lines)):
        (directory / "cluster" / broker).mkdir(parents=True)
        (directory / "cluster" / broker / "broker.log").write_text("\n".join(lines) + "\n")
    return str(directory / "cluster")


def test_a_restarted_follower_and_the_roles_travel(tmp_path, capsys):
    cluster = write_run(tmp_path / "run-1-7", [
        WRITE.format(t="2026-12-07 10:00:05,000", old="1", new="1, 2", e=3),
        APPLY.format(t="2026-12-07 10:00:05,250", old="1", new="1, 2"),
    ], [
        FOLLOW.format(t="2026-12-07 09:59:00,000", pid=100, e=3),  # before the kill: not a restart
        FOLLOW.format(t="2026-12-07 10:00:03,500", pid=200, e=3),  # the restarted worker
        FOLLOW.format(t="2026-12-07 10:00:04,000", pid=200, e=3),  # its roles again: not a new start
    ])
    spans = Spans()
    run_spans(cluster, spans)
    assert spans.rejoin == [1.5]
    assert spans.apply == [0.25]
    assert main([str(tmp_path)]) == 0
    assert "median 1.50 s" in capsys.readouterr().out


def test_a_follower_never_restarted_has_no_rejoin_and_a_clock_step_is_left_out(tmp_path):
    cluster = write_run(tmp_path / "run-1-8", [
        WRITE.format(t="2026-12-07 10:00:05,000", old="1", new="1, 2", e=3),
        APPLY.format(t="2026-12-07 10:20:05,000", old="1", new="1, 2"),  # the worker's date stepped 20 min
    ], [
        FOLLOW.format(t="2026-12-07 10:00:03,500", pid=100, e=3),
    ])
    spans = Spans()
    run_spans(cluster, spans)
    assert spans.rejoin == [] and spans.apply == [] and spans.clock_stepped == 1
