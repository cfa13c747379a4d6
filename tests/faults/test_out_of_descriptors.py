"""A worker out of file descriptors at run time (its RLIMIT_NOFILE lowered under it with
prlimit): what is new is refused with a clear StorageError, what exists keeps being
served and flushed, nothing is left half-made, and the worker stays up. It used to take
EMFILE while opening a directory to fsync it for a failed fdatasync and exit, failing
the acknowledged produces in flight with error 7 during its respawn, and refused new
topics left empty partition directories behind."""

import os
import resource

from mpbroker.codec.errors import ErrorCode
from mpbroker.codec.message import encode_message_set
from tests.broker.wire import WireClient


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_worker_out_of_descriptors_refuses_new_partitions_and_serves_the_rest(broker_factory):
    broker = broker_factory(num_workers=1, num_partitions=1)
    with WireClient(broker.port) as client:
        assert client.produce_acked("existing", 0, encode_message_set([b"before"])).error == ErrorCode.NO_ERROR
        pid = broker.worker_pid(0)
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_descriptors(pid) + 2, hard))
        try:
            answers = [client.produce_acked(f"new{number}", 0, encode_message_set([b"x"]), durability=0).error
                       for number in range(8)]
            refused = answers.count(ErrorCode.STORAGE_ERROR)
            assert refused >= 5 and set(answers) == {ErrorCode.NO_ERROR, ErrorCode.STORAGE_ERROR}, (
                answers, broker.output()[-3000:])
            for _ in range(3):  # flushes of what exists need no new descriptor; they go on
                ack = client.produce_acked("existing", 0, encode_message_set([b"during"]), durability=1)
                assert ack.error == ErrorCode.NO_ERROR
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        assert client.produce_acked("new0", 0, encode_message_set([b"y"]), durability=1).error == ErrorCode.NO_ERROR
        assert client.produce_acked("later", 0, encode_message_set([b"z"]), durability=1).error == ErrorCode.NO_ERROR
    status = broker.status()
    assert status["workers"][0]["restarts"] == 0 and status["workers"][0]["pid"] == pid
    output = broker.output()
    assert "Too many open files" in output
    empty = [name for name in os.listdir(broker.log_dir)
             if os.path.isdir(os.path.join(broker.log_dir, name)) and not os.listdir(os.path.join(broker.log_dir, name))]
    assert not empty, f"refused partitions left empty directories: {empty}"
    accepted = {f"new{number}" for number, error in enumerate(answers) if error == ErrorCode.NO_ERROR}
    assert {p["topic"] for p in status["partitions"]} == {"existing", "later", "new0"} | accepted
