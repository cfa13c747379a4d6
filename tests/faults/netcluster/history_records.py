"""The records of a fault run's history, one dataclass per kind of thing the workload did
or saw (``history.History`` holds them), and the outcome of a produce attempt
(``classify_error``).

Apart from the container so that what a record means (its fields, and why an outcome is
what it is) reads in one place for the workloads that fill the records and the checkers
that judge them; ``history`` owns recording them under its lock and their JSON lines.

What is recorded:

- **Produce attempts** (``Attempt``): one per request on the wire, with a unique id, the
  producer, the partition, the durability (0, 1, 2), its payloads (unique per producer
  write, e.g. ``b"p<producer>-<seq>-<i>"``), start and end times (``time.monotonic``),
  the broker it went to, and the outcome. A retry is a separate attempt with the same
  payloads and ``retry_of`` naming the attempt it repeats (so retries form chains).
- **Reads** (``Read``): one per message a consumer got: the partition, the byte offset
  where the message starts and the next offset, the payload, when, from which broker and
  in which role (if known).
- **Final reads** (``FinalRead``): per partition, every message the final leader shows
  after the heal, from offset 0 (or the log start) to its high watermark.
- **Replica logs** (``ReplicaLog``): per partition and replica, the log's bytes as on
  disk with the leader's high watermark taken at that moment.
- **Faults** (``Fault``): kind, target, start and end; the run's ``seed``; free ``meta``.

And for the modern clients on the record-batch topic (``modern_workload``; offsets
there are the modern protocol's: one per record, increasing, not dense):

- **Sends** (``Send``): one per message handed to a modern producer (confluent-kafka,
  kafka-python), recorded before ``produce()``/``send()`` and finished by its delivery
  report: the producer's name, client, acks and idempotence, the partition, the value
  (unique per message), and the outcome with the offset the acknowledgement named.
  Retries are the client's own (librdkafka and kafka-python resend a batch
  by themselves, up to their delivery timeout) and never appear here: one send may
  be stored more than once by those retries, and only its final report is seen. So a
  send's outcome is the outcome of all the client's attempts together.
- **Group reads** (``GroupRead``): every message a member of the consumer group got,
  with the member, partition, offset and value.
- **Commits** (``Commit``): every synchronous offset commit of a member: partition ->
  offset (the next record to read), ok or not, start and end.
- **Modern final reads** (``ModernFinalRead``): per partition, every record from the
  log start to the high watermark after the heal, ``(offset, value)``, with the
  producer id, epoch and sequence of each idempotent batch as the leader stored it; and
  ``group_final``, the group's committed offset of each partition after the run.

Names (producers, readers, brokers, fault targets) are ints or strings: they go through
JSON unchanged (a tuple would come back a list) and the checker uses them as keys.

The outcome of an attempt (``classify_error`` and ``History``'s ``produce_*`` methods):

- ``ok``: the broker acknowledged it (error 0), with the ack's offset and next offset.
- ``failed``: definitely not appended. Only answers the broker gives before it can
  append anything: validation of the request, which precedes every append
  (``VALIDATION_CODES``: 2 InvalidMessage, 3 WrongPartition, 5 MessageSizeTooLarge,
  6 InvalidTopic).
- ``indeterminate``: maybe appended, maybe not; every other error answer, every
  exception (connection refused or reset, timeout, closed before the answer), and an
  attempt never finished (``pending`` in the record, read as indeterminate). Why the
  error codes are not finer, code by code:

  - 10 NOT_ENOUGH_REPLICAS: sent before the append (ISR below ``min.insync.replicas``)
    *and* after it (the ISR shrank while the set waited for the high watermark,
    Kafka's NotEnoughReplicasAfterAppend); the two look the same on the wire.
  - 9 NOT_LEADER: sent by a replica that does not lead (nothing appended) but also to
    durability-2 waiters of a leader that was demoted after appending their set.
  - 7 PartitionUnavailable: the worker was restarting; the request may have reached
    the worker that went away.
  - 8 StorageError: a failed append is undone, but a flush that fails after the append
    answers durability-1 waiters with 8 too.
  - -1 and anything unknown: no promise.

  Calling those "not appended" would make the checker report aborted reads that are
  not; calling them indeterminate costs nothing but precision (the checker never
  requires an indeterminate payload to be present or absent).
"""

from dataclasses import dataclass, field

OK = "ok"
FAILED = "failed"
INDETERMINATE = "indeterminate"
PENDING = "pending"  # begun, not finished: indeterminate for the checker
OUTCOMES = (OK, FAILED, INDETERMINATE, PENDING)

# Error codes answered only before anything is appended (request validation).
VALIDATION_CODES = frozenset({2, 3, 5, 6})  # InvalidMessage, WrongPartition, MessageSizeTooLarge, InvalidTopic


def classify_error(code: int) -> str:
    """The outcome of an attempt answered with error ``code`` (not 0)."""
    return FAILED if code in VALIDATION_CODES else INDETERMINATE


@dataclass(slots=True)
class Attempt:
    id: int
    producer: object  # the workload's name or number for the producer
    topic: str
    partition: int
    durability: int
    payloads: tuple  # of bytes, in the order sent
    start: float
    broker: object = None  # the broker the request went to
    retry_of: int | None = None  # the attempt this one repeats (same payloads)
    end: float | None = None
    outcome: str = PENDING
    offset: int | None = None  # ok: where the set was written
    next_offset: int | None = None  # ok: the log end just after it
    error: int | None = None  # the wire error code answered, if any
    exception: str | None = None  # repr of the exception, if one ended it

    @property
    def may_be_appended(self) -> bool:
        return self.outcome != FAILED


@dataclass(slots=True)
class Read:
    reader: object
    topic: str
    partition: int
    offset: int  # where the message starts
    next_offset: int  # the offset a consumer goes on from
    payload: bytes
    time: float
    broker: object = None
    role: str | None = None  # "leader", "follower", ... if known


@dataclass(slots=True)
class FinalRead:
    topic: str
    partition: int
    broker: object
    entries: list  # (offset, next_offset, payload), in log order
    time: float


@dataclass(slots=True)
class ReplicaLog:
    topic: str
    partition: int
    broker: object
    data: bytes  # the log's bytes from log_start on
    high_watermark: int  # the leader's, when the bytes were taken
    time: float
    log_start: int = 0
    role: str | None = None


@dataclass(slots=True)
class Fault:
    id: int
    kind: str  # "partition", "isolate", "pause", "kill", ...
    target: object  # what it hit, e.g. "b1|b2,b3" or a broker id
    start: float
    end: float | None = None


@dataclass(slots=True)
class Send:
    id: int
    producer: str  # the workload's name for the producer, e.g. "c1"
    client: str  # "confluent-kafka" or "kafka-python"
    acks: str  # "all" or "1"
    idempotent: bool
    topic: str
    partition: int
    value: bytes  # unique per send
    start: float
    end: float | None = None
    outcome: str = PENDING
    offset: int | None = None  # ok: the offset its acknowledgement named
    error: str | None = None  # the client's error name, if it reported one


@dataclass(slots=True)
class GroupRead:
    member: str
    topic: str
    partition: int
    offset: int
    value: bytes
    time: float


@dataclass(slots=True)
class Commit:
    member: str
    topic: str
    offsets: dict  # partition -> the offset committed (the next record to read)
    start: float
    end: float
    ok: bool
    error: str | None = None


@dataclass(slots=True)
class ModernFinalRead:
    topic: str
    partition: int
    entries: list  # (offset, value), in log order
    high_watermark: int
    time: float
    # (base offset, records, producer id, producer epoch, base sequence) of each stored batch
    # with a producer id, from the leader's log on disk: which try of which producer wrote what
    batches: list = field(default_factory=list)
