"""The history checker's property: random valid histories built from a model of the
partitions' logs pass, and each one broken in one way (a loss, a swap, a duplicate, an
aborted read, a divergent read or replica) is found as exactly that kind of problem."""

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mpbroker.codec.message import encode_message
from tests.faults.history_run import TOPIC, Run, log_bytes, payloads
from tests.faults.netcluster.checker import check
from tests.faults.netcluster.checker_report import (
    ABORTED,
    DIVERGENT_READS,
    DIVERGENT_REPLICAS,
    DUPLICATED,
    LOST,
    ORDER,
)
from tests.faults.netcluster.history import History
from tests.faults.netcluster.history_records import FAILED, INDETERMINATE, OK

OUTCOMES = st.sampled_from(["ok", "failed", "appended", "not appended", "pending appended"])


@st.composite
def models(draw):
    """A valid run from a model: per partition a log; producers' attempts (with retry
    chains) append to it or not as their outcome allows; reads of what the log held
    then. Returns the Run (attempts recorded) and the read specifications, applied by
    ``derive`` once a mutation has (or has not) changed the logs."""
    run = Run(seed=draw(st.integers(0, 1 << 30)))
    partitions = draw(st.integers(1, 3))
    seqs = defaultdict(int)
    read_specs = []

    def attempt_chain(producer, partition, durability, count, outcomes):
        seq = seqs[producer]
        seqs[producer] += 1
        sent = payloads(producer, seq, count)
        previous = None
        for outcome in outcomes:
            if outcome == "ok":
                previous = run.produce(producer, sent, durability, OK, partition=partition, retry_of=previous)
                return
            if outcome == "failed":
                previous = run.produce(producer, sent, durability, FAILED, partition=partition, retry_of=previous,
                                       code=draw(st.sampled_from([2, 3, 5, 6])))
            elif outcome == "pending appended":
                previous = run.history.begin_produce(producer, TOPIC, partition, durability, sent,
                                                     retry_of=previous, start=run.tick())
                run.append(partition, sent)
                return  # never answered: no retry
            else:
                code = draw(st.sampled_from([None, 7, 8, 9, 10]))
                previous = run.produce(producer, sent, durability, INDETERMINATE, appended=outcome == "appended",
                                       partition=partition, retry_of=previous, code=code)

    attempt_chain(0, 0, 2, 1, ["ok"])  # two acknowledged sets of one producer: something to swap
    attempt_chain(0, 0, 2, 2, ["ok"])
    steps = draw(st.lists(st.tuples(st.sampled_from(["produce", "produce", "read"]), st.integers(0, 2),
                                    st.integers(0, 2), st.sampled_from([0, 1, 2, 2]), st.integers(1, 3),
                                    st.lists(OUTCOMES, min_size=1, max_size=3)), max_size=25))
    for kind, producer, partition, durability, count, outcomes in steps:
        partition %= partitions
        if kind == "produce":
            attempt_chain(producer, partition, durability, count, outcomes)
        else:
            upto = len(run.logs[partition])
            start = draw(st.integers(0, upto))
            read_specs.append((f"c{producer}", partition, start, upto))
    attempt_chain(0, 0, 2, 1, ["ok"])  # partition 0 ends with an acknowledged set: something to lose
    read_specs.append(("c-all", 0, 0, len(run.logs[0])))
    return run, partitions, read_specs


def derive(run, partitions, read_specs, tails) -> History:
    """The reads, final reads and replica logs of the (maybe mutated) logs."""
    for reader, partition, start, upto in read_specs:
        run.read(reader, partition, start, min(upto, len(run.logs[partition])))
    history = run.finish(partitions=range(partitions), replicas=(1,))
    for partition in range(partitions):
        data = log_bytes(run.logs[partition])
        for broker, tail in zip((2, 3), tails):
            history.record_replica_log(TOPIC, partition, broker, data + tail, len(data))  # tails: uncommitted
    return history


def acked_d2_indices(run, partition) -> dict:
    """Index in the log -> (producer, attempt id), for payloads acknowledged with
    durability 2 that appear once in the log."""
    counts = defaultdict(int)
    for _, _, payload in run.logs[partition]:
        counts[payload] += 1
    acked = {}
    for attempt in run.history.attempts.values():
        if attempt.outcome == OK and attempt.durability == 2 and attempt.partition == partition:
            for payload in attempt.payloads:
                acked[payload] = (attempt.producer, attempt.id)
    return {index: acked[payload] for index, (_, _, payload) in enumerate(run.logs[partition])
            if payload in acked and counts[payload] == 1}


def relaid(entries, payload_list):
    """A log holding these payloads in this order, from offset 0."""
    out, offset = [], entries[0][0] if entries else 0
    for payload in payload_list:
        next_offset = offset + len(encode_message(payload))
        out.append((offset, next_offset, payload))
        offset = next_offset
    return out


TAILS = st.lists(st.binary(max_size=30), min_size=2, max_size=2)
MUTATIONS = ["none", "lose", "swap", "duplicate", "abort", "read other payload", "read flipped byte", "replica"]


@pytest.mark.parametrize("mutation", MUTATIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), tails=TAILS, data=st.data())
def test_model_histories_pass_and_each_mutation_is_found(mutation, model, tails, data):
    run, partitions, read_specs = model
    expected = set()
    if mutation == "lose":  # the log was cut below the last acknowledged durability-2 set
        candidates = [p for p in range(partitions) if acked_d2_indices(run, p)
                      and max(acked_d2_indices(run, p)) == max(i for i, (_, _, payload) in enumerate(run.logs[p])
                                                                if _acked(run, p, payload, 2))]
        partition = data.draw(st.sampled_from(candidates))
        cut = max(acked_d2_indices(run, partition))
        run.logs[partition][cut:] = []
        expected = {LOST}
    elif mutation == "swap":  # two acknowledged payloads of one producer trade places
        indices = acked_d2_indices(run, 0)
        pairs = [(i, j) for i in indices for j in indices if i < j and indices[i][0] == indices[j][0]
                 and indices[i][1] != indices[j][1]]
        i, j = data.draw(st.sampled_from(pairs))
        order = [payload for _, _, payload in run.logs[0]]
        order[i], order[j] = order[j], order[i]
        run.logs[0] = relaid(run.logs[0], order)
        expected = {ORDER}
    elif mutation == "duplicate":  # an acknowledged payload sent once appears twice
        index = data.draw(st.sampled_from(sorted(acked_d2_indices(run, 0))))
        payload = run.logs[0][index][2]
        chain = [a for a in run.history.attempts.values() if payload in a.payloads and a.outcome != FAILED]
        if len(chain) == 1:
            run.append(0, [payload])
            expected = {DUPLICATED}
    elif mutation == "abort":  # a refused set is in the log
        run.produce(9, payloads(9, 0, count=1), outcome=FAILED, appended=True, partition=data.draw(
            st.integers(0, partitions - 1)), code=2)
        expected = {ABORTED}
    history = derive(run, partitions, read_specs, tails)
    if mutation in ("read other payload", "read flipped byte"):
        index = data.draw(st.integers(0, len(history.reads) - 1))
        read = history.reads[index]
        others = [p for _, _, p in run.logs[read.partition] if p != read.payload]
        if mutation == "read flipped byte" and read.payload:
            read.payload = bytes([read.payload[0] ^ 1]) + read.payload[1:]
            expected = {DIVERGENT_READS, ABORTED}  # a payload nobody sent
        elif others:
            read.payload = data.draw(st.sampled_from(others))
            expected = {DIVERGENT_READS}
        else:
            read.next_offset += 1
            expected = {DIVERGENT_READS}
    elif mutation == "replica":
        replica = next(r for r in history.replica_logs if (r.partition, r.broker) == (0, 2))
        position = data.draw(st.integers(0, replica.high_watermark - 1))
        flipped = bytearray(replica.data)
        flipped[position] ^= 0x01
        replica.data = bytes(flipped)
        expected = {DIVERGENT_REPLICAS}
    event(f"{mutation}: {', '.join(sorted(expected)) or 'nothing'}")
    report = check(history)
    assert set(report.failures()) == expected, f"{mutation}:\n{report}"
    if mutation == "none":
        assert report.total.lost == {} or sum(report.total.lost.values()) == 0
        assert report.total.duplicated_unexplained == 0


def _acked(run, partition, payload, durability) -> bool:
    return any(a.outcome == OK and a.durability == durability and a.partition == partition and payload in a.payloads
               for a in run.history.attempts.values())
