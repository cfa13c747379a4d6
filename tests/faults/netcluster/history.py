"""The history of one fault run: everything the workload did and saw, for ``checker``.

Owns the record and nothing else: the workload's producer and consumer threads append
to one ``History`` while the fault schedule runs (every method takes the one lock, so
threads may call them freely), and after the heal the harness adds the final full read
of each partition and each replica's log bytes. The checker then reads the whole
history at once; ``save``/``load`` keep a failing run's history (JSON lines, bytes in
base64) so it can be checked again offline, e.g. after a fix to the checker.

The records themselves, and what each outcome of a produce attempt means:
``history_records``. ``save`` writes ``FORMAT_VERSION``; ``load`` reads every one of
``LOADABLE_VERSIONS``, so a history kept from an older run still checks.
"""

import base64
import json
import threading
import time
from dataclasses import asdict, dataclass, field

from .history_records import (
    FAILED,
    INDETERMINATE,
    OK,
    PENDING,
    Attempt,
    Commit,
    Fault,
    FinalRead,
    GroupRead,
    ModernFinalRead,
    Read,
    ReplicaLog,
    Send,
    classify_error,
)

FORMAT_VERSION = 2  # 2 added the modern clients' records; version 1 histories load unchanged
LOADABLE_VERSIONS = (1, 2)


@dataclass
class History:
    seed: object = None
    meta: dict = field(default_factory=dict)
    attempts: dict = field(default_factory=dict)  # id -> Attempt, in the order begun
    reads: list = field(default_factory=list)
    final_reads: dict = field(default_factory=dict)  # (topic, partition) -> FinalRead
    replica_logs: list = field(default_factory=list)
    faults: list = field(default_factory=list)
    sends: dict = field(default_factory=dict)  # id -> Send, in the order begun
    group_reads: list = field(default_factory=list)
    commits: list = field(default_factory=list)
    modern_finals: dict = field(default_factory=dict)  # (topic, partition) -> ModernFinalRead
    group_final: dict = field(default_factory=dict)  # (topic, partition) -> the group's committed offset after the run

    def __post_init__(self):
        self._lock = threading.Lock()
        self._next_attempt = max(self.attempts, default=0) + 1
        self._next_send = max(self.sends, default=0) + 1
        self._next_fault = max((fault.id for fault in self.faults), default=0) + 1

    # --- produces -----------------------------------------------------------------

    def begin_produce(self, producer, topic: str, partition: int, durability: int, payloads, broker=None,
                      retry_of: int | None = None, start: float | None = None) -> int:
        """Record an attempt about to be sent; its id, for ``produce_*`` and ``retry_of``."""
        if durability not in (0, 1, 2):
            raise ValueError(f"durability {durability}: 0, 1 or 2")
        payloads = tuple(bytes(payload) for payload in payloads)
        start = time.monotonic() if start is None else start
        with self._lock:
            if retry_of is not None and retry_of not in self.attempts:
                raise ValueError(f"retry of unknown attempt {retry_of}")
            attempt_id = self._next_attempt
            self._next_attempt += 1
            self.attempts[attempt_id] = Attempt(attempt_id, producer, topic, partition, durability, payloads,
                                                start, broker, retry_of)
        return attempt_id

    def produce_ok(self, attempt_id: int, offset: int, next_offset: int, end: float | None = None) -> None:
        self._finish(attempt_id, OK, end, offset=offset, next_offset=next_offset, error=0)

    def produce_error(self, attempt_id: int, code: int, end: float | None = None) -> None:
        """The broker answered error ``code`` (not 0): failed or indeterminate, by ``classify_error``."""
        if code == 0:
            raise ValueError("error 0 is an acknowledgement: produce_ok")
        self._finish(attempt_id, classify_error(code), end, error=int(code))

    def produce_exception(self, attempt_id: int, exc: BaseException | str, end: float | None = None) -> None:
        """No answer (connection error, timeout, ...): indeterminate."""
        self._finish(attempt_id, INDETERMINATE, end, exception=exc if isinstance(exc, str) else repr(exc))

    def produce_answered(self, attempt_id: int, ack, end: float | None = None) -> str:
        """Record a ``responses.ProduceAck`` (or anything with error, offset, next_offset);
        the outcome."""
        if ack.error == 0:
            self.produce_ok(attempt_id, ack.offset, ack.next_offset, end)
        else:
            self.produce_error(attempt_id, ack.error, end)
        return self.attempts[attempt_id].outcome

    def _finish(self, attempt_id: int, outcome: str, end, **fields) -> None:
        end = time.monotonic() if end is None else end
        with self._lock:
            attempt = self.attempts[attempt_id]
            if attempt.outcome != PENDING:
                raise ValueError(f"attempt {attempt_id} already finished ({attempt.outcome})")
            attempt.outcome = outcome
            attempt.end = end
            for name, value in fields.items():
                setattr(attempt, name, value)

    # --- reads --------------------------------------------------------------------

    def record_read(self, reader, topic: str, partition: int, offset: int, next_offset: int, payload: bytes,
                    broker=None, role: str | None = None, at: float | None = None) -> None:
        read = Read(reader, topic, partition, offset, next_offset, bytes(payload),
                    time.monotonic() if at is None else at, broker, role)
        with self._lock:
            self.reads.append(read)

    def record_fetch(self, reader, topic: str, partition: int, fetch_offset: int, payloads, next_offsets,
                     broker=None, role: str | None = None, at: float | None = None) -> None:
        """Every message of one fetch answer, as ``decode_messages(data, fetch_offset)``
        gives them: each starts where the previous one's next offset is (uncompressed
        messages, which is what the workload sends)."""
        at = time.monotonic() if at is None else at
        reads = []
        offset = fetch_offset
        for payload, next_offset in zip(payloads, next_offsets):
            reads.append(Read(reader, topic, partition, offset, next_offset, bytes(payload), at, broker, role))
            offset = next_offset
        with self._lock:
            self.reads.extend(reads)

    def record_final_read(self, topic: str, partition: int, broker, entries, at: float | None = None) -> None:
        """The final full read of a partition: ``entries`` are (offset, next_offset, payload)."""
        final = FinalRead(topic, partition, broker, [(int(o), int(n), bytes(p)) for o, n, p in entries],
                          time.monotonic() if at is None else at)
        with self._lock:
            self.final_reads[(topic, partition)] = final

    def record_final_messages(self, topic: str, partition: int, broker, start_offset: int, payloads, next_offsets,
                              at: float | None = None) -> None:
        """The final read from decoded fetches: payloads and next offsets from ``start_offset`` on."""
        entries = []
        offset = start_offset
        for payload, next_offset in zip(payloads, next_offsets):
            entries.append((offset, next_offset, payload))
            offset = next_offset
        self.record_final_read(topic, partition, broker, entries, at)

    def record_replica_log(self, topic: str, partition: int, broker, data: bytes, high_watermark: int,
                           log_start: int = 0, role: str | None = None, at: float | None = None) -> None:
        replica = ReplicaLog(topic, partition, broker, bytes(data), int(high_watermark),
                             time.monotonic() if at is None else at, log_start, role)
        with self._lock:
            self.replica_logs.append(replica)

    def snapshot_attempts(self) -> list:
        """The attempts so far (a copy taken under the lock, while threads record)."""
        with self._lock:
            return list(self.attempts.values())

    # --- the modern clients ------------------------------------------------------

    def begin_send(self, producer: str, client: str, acks: str, idempotent: bool, topic: str, partition: int,
                   value: bytes, start: float | None = None) -> int:
        """Record a message about to be handed to a modern producer; its id."""
        start = time.monotonic() if start is None else start
        with self._lock:
            send_id = self._next_send
            self._next_send += 1
            self.sends[send_id] = Send(send_id, producer, client, acks, bool(idempotent), topic, partition,
                                       bytes(value), start)
        return send_id

    def send_ok(self, send_id: int, offset: int | None, end: float | None = None) -> None:
        """The client reported the value stored at ``offset``; None: stored, the offset
        not told (librdkafka reports some deliveries of an idempotent producer so)."""
        self._finish_send(send_id, OK, end, offset=None if offset is None else int(offset))

    def send_error(self, send_id: int, error: str, certainly_not_appended: bool = False,
                   end: float | None = None) -> None:
        """The client reported ``error``: failed only if it certainly appended nothing
        (the caller's judgement, by error name), else indeterminate."""
        self._finish_send(send_id, FAILED if certainly_not_appended else INDETERMINATE, end, error=str(error))

    def _finish_send(self, send_id: int, outcome: str, end, **fields) -> None:
        end = time.monotonic() if end is None else end
        with self._lock:
            send = self.sends[send_id]
            if send.outcome != PENDING:
                raise ValueError(f"send {send_id} already finished ({send.outcome})")
            send.outcome, send.end = outcome, end
            for name, value in fields.items():
                setattr(send, name, value)

    def record_group_reads(self, member: str, topic: str, messages, at: float | None = None) -> None:
        """``messages``: (partition, offset, value) a member got from one poll."""
        at = time.monotonic() if at is None else at
        reads = [GroupRead(member, topic, int(p), int(o), bytes(v), at) for p, o, v in messages]
        with self._lock:
            self.group_reads.extend(reads)

    def record_commit(self, member: str, topic: str, offsets: dict, start: float, ok: bool, error: str | None = None,
                      end: float | None = None) -> None:
        commit = Commit(member, topic, {int(p): int(o) for p, o in offsets.items()}, start,
                        time.monotonic() if end is None else end, bool(ok), error)
        with self._lock:
            self.commits.append(commit)

    def record_modern_final(self, topic: str, partition: int, entries, high_watermark: int,
                            at: float | None = None, batches=()) -> None:
        final = ModernFinalRead(topic, partition, [(int(o), bytes(v)) for o, v in entries], int(high_watermark),
                                time.monotonic() if at is None else at, [tuple(map(int, b)) for b in batches])
        with self._lock:
            self.modern_finals[(topic, partition)] = final

    def record_group_final(self, topic: str, committed: dict) -> None:
        """The group's committed offset of each partition after the run (partition -> offset;
        a partition with none committed left out)."""
        with self._lock:
            for partition, offset in committed.items():
                self.group_final[(topic, int(partition))] = int(offset)

    # --- faults -------------------------------------------------------------------

    def begin_fault(self, kind: str, target, start: float | None = None) -> int:
        start = time.monotonic() if start is None else start
        with self._lock:
            fault = Fault(self._next_fault, kind, target, start)
            self._next_fault += 1
            self.faults.append(fault)
        return fault.id

    def end_fault(self, fault_id: int, end: float | None = None) -> None:
        end = time.monotonic() if end is None else end
        with self._lock:
            for fault in self.faults:
                if fault.id == fault_id:
                    fault.end = end
                    return
        raise KeyError(fault_id)

    def record_fault(self, kind: str, target, start: float, end: float | None = None) -> int:
        """A fault whose start and end are known already."""
        fault_id = self.begin_fault(kind, target, start)
        if end is not None:
            self.end_fault(fault_id, end)
        return fault_id

    # --- JSON lines ---------------------------------------------------------------

    def save(self, path) -> None:
        """Write the history as JSON lines (one record each; bytes in base64)."""
        with self._lock, open(path, "w", encoding="utf-8") as file:
            def put(record):
                file.write(json.dumps(record, separators=(",", ":")))
                file.write("\n")

            put({"type": "header", "version": FORMAT_VERSION, "seed": self.seed, "meta": self.meta})
            for attempt in self.attempts.values():
                record = asdict(attempt)
                record["payloads"] = [_b64(payload) for payload in attempt.payloads]
                put({"type": "attempt", **record})
            for read in self.reads:
                put({"type": "read", **asdict(read), "payload": _b64(read.payload)})
            for final in self.final_reads.values():
                put({"type": "final", "topic": final.topic, "partition": final.partition, "broker": final.broker,
                     "time": final.time, "entries": [[o, n, _b64(p)] for o, n, p in final.entries]})
            for replica in self.replica_logs:
                put({"type": "replica", **asdict(replica), "data": _b64(replica.data)})
            for fault in self.faults:
                put({"type": "fault", **asdict(fault)})
            for send in self.sends.values():
                put({"type": "send", **asdict(send), "value": _b64(send.value)})
            for read in self.group_reads:
                put({"type": "group_read", **asdict(read), "value": _b64(read.value)})
            for commit in self.commits:
                put({"type": "commit", **asdict(commit), "offsets": [[p, o] for p, o in commit.offsets.items()]})
            for final in self.modern_finals.values():
                put({"type": "modern_final", **asdict(final), "entries": [[o, _b64(v)] for o, v in final.entries]})
            for (topic, partition), offset in self.group_final.items():
                put({"type": "group_final", "topic": topic, "partition": partition, "offset": offset})

    @classmethod
    def load(cls, path) -> "History":
        history = cls()
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                kind = record.pop("type")
                if kind == "header":
                    if record.get("version") not in LOADABLE_VERSIONS:
                        raise ValueError(f"{path}: format version {record.get('version')}, not one of "
                                         f"{LOADABLE_VERSIONS}")
                    history.seed, history.meta = record.get("seed"), record.get("meta") or {}
                elif kind == "attempt":
                    record["payloads"] = tuple(_unb64(payload) for payload in record["payloads"])
                    history.attempts[record["id"]] = Attempt(**record)
                elif kind == "read":
                    record["payload"] = _unb64(record["payload"])
                    history.reads.append(Read(**record))
                elif kind == "final":
                    entries = [(o, n, _unb64(p)) for o, n, p in record["entries"]]
                    final = FinalRead(record["topic"], record["partition"], record["broker"], entries, record["time"])
                    history.final_reads[(final.topic, final.partition)] = final
                elif kind == "replica":
                    record["data"] = _unb64(record["data"])
                    history.replica_logs.append(ReplicaLog(**record))
                elif kind == "fault":
                    history.faults.append(Fault(**record))
                elif kind == "send":
                    record["value"] = _unb64(record["value"])
                    history.sends[record["id"]] = Send(**record)
                elif kind == "group_read":
                    record["value"] = _unb64(record["value"])
                    history.group_reads.append(GroupRead(**record))
                elif kind == "commit":
                    record["offsets"] = {p: o for p, o in record["offsets"]}
                    history.commits.append(Commit(**record))
                elif kind == "modern_final":
                    record["entries"] = [(o, _unb64(v)) for o, v in record["entries"]]
                    record["batches"] = [tuple(batch) for batch in record.get("batches", ())]
                    final = ModernFinalRead(**record)
                    history.modern_finals[(final.topic, final.partition)] = final
                elif kind == "group_final":
                    history.group_final[(record["topic"], record["partition"])] = record["offset"]
                else:
                    raise ValueError(f"{path}:{number}: unknown record type {kind!r}")
        history.__post_init__()
        return history


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)
