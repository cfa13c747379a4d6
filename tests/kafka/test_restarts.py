"""Record-batch partitions across restarts, on a real broker: the format survives, a
torn tail (a power cut in the middle of a batch) is cut at the last whole batch and
nothing acknowledged is lost, and an idempotent producer's retry after a SIGKILL is
still answered with its original offset and not written twice (the producer state is
rebuilt from the log)."""

import glob
import os
import signal

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from mpbroker.records import encode_batch, iter_records
from mpbroker.segments.naming import RECORD_BATCHES_FILE
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.wire import BASE_TS, Wire, good_batch


def _segment(broker, topic: str) -> str:
    [path] = glob.glob(os.path.join(broker.log_dir, f"{topic}-0", "*.kafka"))
    return path


def _records(broker, topic: str) -> list:
    with open(_segment(broker, topic), "rb") as segment:
        return [(record.offset, record.key, record.value) for record in iter_records(segment.read())]


def test_a_torn_batch_is_cut_and_the_acknowledged_ones_stay(tmp_path):
    broker = LocalBroker(tmp_path, num_workers=1, log_flush_interval=1).start()
    try:
        with Wire(broker) as wire:
            acknowledged = [wire.produce("torn", 0, good_batch(3)) for _ in range(4)]
        assert all(error == 0 for error, _ in acknowledged)
        before = _records(broker, "torn")
        assert len(before) == 12
    finally:
        broker.stop(signal.SIGKILL)
    path = _segment(broker, "torn")
    whole = os.path.getsize(path)
    with open(path, "ab") as segment:  # half a batch, as a power cut leaves one
        segment.write(good_batch(3)[:40])
    broker.start()
    try:
        assert os.path.getsize(path) == whole  # recovery cut the torn batch, nothing else
        assert os.path.exists(os.path.join(broker.log_dir, "torn-0", RECORD_BATCHES_FILE))
        assert _records(broker, "torn") == before
        with Wire(broker) as wire:
            assert wire.latest_offset("torn", 0) == whole
            error, offset = wire.produce("torn", 0, good_batch(1))
        assert error == 0 and offset > whole - 1  # appended after the last whole batch
    finally:
        broker.stop()
        broker.close()


def test_a_retry_after_a_sigkill_is_answered_with_the_original_offset(tmp_path):
    broker = LocalBroker(tmp_path, num_workers=1, log_flush_interval=1).start()
    try:
        with Wire(broker) as wire:
            answer = wire.call(22, 0, bytes(InitProducerIdRequest[0](
                transactional_id=None, transaction_timeout_ms=60_000).encode(version=0)), InitProducerIdResponse)
            assert answer.error_code == 0 and answer.producer_epoch == 0
            producer = answer.producer_id

            def batch(sequence: int) -> bytes:
                return encode_batch([(b"k", b"v%d" % sequence, [], BASE_TS)], producer_id=producer,
                                    producer_epoch=0, base_sequence=sequence)

            first = wire.produce("idem", 0, batch(0))
            second = wire.produce("idem", 0, batch(1))
        assert first[0] == second[0] == 0
    finally:
        broker.stop(signal.SIGKILL)
    size = os.path.getsize(_segment(broker, "idem"))
    broker.start()
    try:
        with Wire(broker) as wire:
            assert wire.produce("idem", 0, batch(1)) == second  # the retry: its original offset
            assert wire.produce("idem", 0, batch(3))[0] == 45  # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER
            third = wire.produce("idem", 0, batch(2))
        assert os.path.getsize(_segment(broker, "idem")) > size
        assert third[0] == 0 and third[1] > second[1]
        values = [value for _, _, value in _records(broker, "idem")]
        assert values == [b"v0", b"v1", b"v2"]  # nothing written twice
    finally:
        broker.stop()
        broker.close()
