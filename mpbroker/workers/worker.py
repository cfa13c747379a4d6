"""The partition worker process.

A worker owns the partitions its slot is assigned (``ownership.owner_slot``): it
opens and recovers their logs, takes produce records from its request ring, appends,
flushes on the policy (on background threads), runs retention (every
``log.cleanup.interval.mins``, and at once on a reload), publishes each log's
state in its partition table, checkpoints the logs' recovery points into ``log.dir``
and answers through its answer ring. For the replicated partitions among them it
acts on the roles the registrar read (``replication``): leading (high watermark, ISR,
durability 2) or following (``replica_fetcher``: fetching from the leader over the
broker port, in this same loop).

Recovery starts at each log's recovery point: after a respawn, the one its previous
life published in the partition table (exact: it survives the process); after a
broker restart, the one in this slot's checkpoint file (at most
``log.flush.offset.checkpoint.interval.ms`` behind). Everything runs on
one event loop: the ring's eventfd, the flusher's eventfd, the control channel from
the supervisor and a wake-up pipe for signals, plus timers.

Exit codes: 0 after a graceful stop (every log flushed and closed), 3 when a flush
failed (the data's durability is in doubt: the supervisor respawns the worker, which
recovers from what is on disk), 4 when a partition log cannot be opened (a damaged
directory recovery must not guess about: the message names it), 1 for anything
unexpected. Signals, the heartbeat, the timers and the supervisor's messages are the
child-process skeleton's (``process.child``).
"""

import collections
import functools
import logging
import time

from mpbroker.clock import monotonic_ms, wall_clock_ms
from mpbroker.codec.errors import LogCorruptError, StorageError
from mpbroker.config.broker_config import config_from_properties
from mpbroker.ipc import messages
from mpbroker.ipc.control import Op
from mpbroker.ipc.ring import Ring
from mpbroker.logging_setup import set_level
from mpbroker.ownership import owner_slot
from mpbroker.process.child import ChildProcess
from mpbroker.segments import LogManager, topic_configs
from mpbroker.segments.flushing import FlushPostponedError, LogRemovedError
from mpbroker.segments.recovery_points import (
    UNKNOWN,
    checkpoint_path,
    read_checkpoint,
    remove_other_layouts,
    stored,
    write_checkpoint,
)
from mpbroker.throttled_log import ThrottledLog
from mpbroker.workers.flusher import Flusher
from mpbroker.workers.produce_handler import ProduceHandler
from mpbroker.workers.publisher import Publisher
from mpbroker.workers.replica_fetcher import ReplicaFetcher
from mpbroker.workers.replication import ReplicaManager
from mpbroker.workers.topic_removal import TopicRemoval

log = logging.getLogger(__name__)

EXIT_GRACEFUL = 0
EXIT_CRASH = 1
EXIT_FLUSH_FAILED = 3
EXIT_LOG_REFUSED = 4
FULL_RING_RETRY_S = 0.005  # re-try a full answer ring this often (a missed space wake-up costs no more)
REPLICATION_TICK_MS = 100  # ISR checks, held acknowledgements, silent leader connections


class PartitionWorker(ChildProcess):
    def __init__(self, slot: int, config, requests: Ring, answers: Ring, table, slots, control, counters, *,
                 recover: bool, lease_slot: int | None = None):
        super().__init__(slots, slot, control)
        self.config = config
        self.busy_poll_s = config.busy_poll_us / 1e6
        self.requests = requests
        self.answers = answers
        self.recover = recover
        num_workers = config.num_workers
        self.logs = LogManager(config.log_dir, functools.partial(topic_log_config, config),
                               owns=lambda topic, partition: owner_slot(topic, partition, num_workers) == slot)
        self.table = table
        self.publisher = Publisher(table)
        self._checkpoint_path = checkpoint_path(self.logs.log_dir, slot, num_workers)
        self._checkpointed = None  # the points last written to the checkpoint file
        self._checkpoint_failures = ThrottledLog(log)
        self._postponed = set()  # logs whose flush waits for a file descriptor
        self._postponed_log = ThrottledLog(log)
        self.flusher = Flusher(counters)
        self._outbox = collections.deque()
        if lease_slot is None:
            lease = lambda: 0  # noqa: E731 - no registrar, no lease: no replicated partition is led here
            roles_seq = lambda: 0  # noqa: E731
        else:
            lease = lambda: slots.lease(lease_slot)  # noqa: E731
            roles_seq = lambda: slots.roles_seq(lease_slot)  # noqa: E731
        self.replication = ReplicaManager(config.brokerid, self.logs, self.publisher, config, self._queue_answer,
                                          lambda **fields: self.control.send(Op.ISR_CHANGE, **fields), lease,
                                          counters, roles_seq, request_flush=self.flusher.request)
        self.fetcher = None  # made in start(), with the event loop
        self.handler = ProduceHandler(self.logs, self.publisher, self.flusher, config, self._queue_answer,
                                      self.replication)
        self._timers = []  # the ones the configuration sets (a reload restarts them)
        self._removal = TopicRemoval(self)

    # --- setup ------------------------------------------------------------------

    def _open_logs(self) -> None:
        started = time.monotonic()
        checkpointed = read_checkpoint(self._checkpoint_path)
        recovery_point_of = self._recovery_points(checkpointed) if self.recover else None
        opened = self.logs.open_existing(recover=self.recover, recovery_point_of=recovery_point_of)
        for partition_log in opened:
            self.publisher.add(partition_log)
            if partition_log.needs_flush:
                self.flusher.request(partition_log)  # what recovery kept becomes durable, and known to be
        if checkpointed is None:
            self._write_first_checkpoint()
        if self.recover:
            scanned = sum(partition_log.recovery_scanned for partition_log in opened)
            how = f"recovered: {scanned} bytes past the recovery points scanned"
        else:
            how = "clean shutdown, no recovery"
        log.info("opened %d partition logs in %.2fs (%s)", len(opened), time.monotonic() - started, how)

    def _recovery_points(self, checkpointed):
        """``(topic, partition) -> recovery point or None`` for recovery: what this slot's
        previous life published (a respawn), else the checkpoint file (``checkpointed``);
        None (not known) makes recovery scan the last segment only."""
        published = {}
        for index, topic, partition in self.table.names():
            point = self.table.take_over(index).recovery_point
            if point != UNKNOWN:
                published[(topic, partition)] = point

        def recovery_point_of(topic: str, partition: int):
            point = published.get((topic, partition))
            if point is None and checkpointed is not None:
                point = checkpointed.get((topic, partition), 0)  # missing: created after the checkpoint
            return None if point is None or point == UNKNOWN else point

        return recovery_point_of

    def _write_first_checkpoint(self) -> None:
        """This slot has no checkpoint (a new log.dir, a new num.workers, an older
        version's files): write one before the first produce. From then on a partition
        missing from the file was created after it, and a power cut before the next
        write cannot leave a new partition's gap to a recovery without a recovery point."""
        points = self._recovery_points_now()
        try:
            remove_other_layouts(self.logs.log_dir, self.config.num_workers)
            write_checkpoint(self._checkpoint_path, points)
        except OSError as exc:
            log.error("writing the recovery points to %s failed: %s", self._checkpoint_path, exc)
            return
        self._checkpointed = points

    def _make_timers(self, now: int) -> None:
        for timer in self._timers:
            self.timers.cancel(timer)
        config = self.config
        self._timers = [
            self.timers.every(config.log_default_flush_scheduler_interval_ms, self._flush_due_logs, now),
            self.timers.every(config.log_cleanup_interval_mins * 60_000, self._apply_retention, now),
            self.timers.every(config.log_flush_offset_checkpoint_interval_ms, self._checkpoint, now),
        ]

    # --- the process (process.child.ChildProcess) --------------------------------

    def start(self):
        self.requests.attach_reader(discard=True)
        self.answers.attach_writer()
        try:
            self._open_logs()
        except (LogCorruptError, StorageError) as exc:
            log.critical("cannot open the partition logs: %s", exc)
            return EXIT_LOG_REFUSED
        self._make_timers(monotonic_ms())
        self.watch(self.requests.data_fd, self._on_requests)
        self.watch(self.answers.space_fd, self._on_answer_space)
        self.watch(self.flusher.done_fd, self._on_flushed)
        self.fetcher = ReplicaFetcher(self, self.config.brokerid, self.config, self.replication, self.publisher,
                                      self.flusher, ThrottledLog(log), self.checkpoint_now,
                                      lambda: self.flusher.checkpoint_in_flight is None)
        self.replication.fetcher = self.fetcher
        self.timers.every(REPLICATION_TICK_MS, self._replication_tick)
        return None

    def control_handlers(self) -> dict:
        return {Op.ROLES: self._on_roles, Op.TOPIC_CONFIG: self._on_topic_config}

    def _on_topic_config(self, message: dict) -> None:
        """A topic's settings changed (``registrar.topic_settings`` rewrote its file): its
        open logs take them now (rolls, flushes, retention, min.insync.replicas), and
        retention runs on them at once, as a reload does."""
        topic = message["topic"]
        try:
            changed = self.logs.reconfigure_topic(topic)
        except (StorageError, ValueError) as exc:
            log.error("topic %s: cannot apply its settings: %s; its logs keep the ones they had", topic, exc)
            return
        if changed:
            config = changed[0].config
            log.info("topic %s: %d logs now roll at %d bytes, keep %d ms / %d bytes, min.insync.replicas %d", topic,
                     len(changed), config.segment_bytes, config.retention_ms, config.retention_bytes,
                     config.min_insync_replicas)
            now = wall_clock_ms()
            for partition_log in changed:
                if partition_log.apply_retention(now):
                    self.publisher.publish(partition_log)

    def _on_roles(self, message: dict) -> None:
        self.replication.apply_roles(message.get("partitions", ()))
        if "seq" in message:
            self.replication.applied_seq = max(self.replication.applied_seq, message["seq"])
        self.handler.release_held()

    def _replication_tick(self, now: int) -> None:
        self.handler.release_held(now)
        self.replication.tick(now)
        self.fetcher.check_links(now)

    def ready_fields(self) -> dict:
        return {"slot": self.slot, "partitions": len(self.logs)}

    def poll_timeout(self):
        return FULL_RING_RETRY_S if self._outbox else None

    def after_events(self) -> None:
        woken = self.replication.take_woken()
        if woken:
            self._queue_wakes(woken)
        self._send_answers()

    def _queue_wakes(self, woken: list) -> None:
        """KIND_WAKE records for these partitions, each one that fits the answer ring."""
        limit = self.answers.max_record_body - messages.WAKE_HEAD_BYTES
        batch, size = [], 0
        for key in woken:
            entry_size = messages.wake_bytes(key[0])
            if batch and (size + entry_size > limit or len(batch) == messages.MAX_WAKES):
                self._queue_answer(messages.KIND_WAKE, messages.encode_wake(batch))
                batch, size = [], 0
            batch.append(key)
            size += entry_size
        if batch:
            self._queue_answer(messages.KIND_WAKE, messages.encode_wake(batch))

    def finish(self) -> int:
        if self.exit_code == EXIT_FLUSH_FAILED:
            # No second flush and no more acks: after a failed fsync the page cache may
            # call dirty data clean, so a retry could "succeed" for data that is not on
            # disk. Exit; the respawned worker recovers from what really is on disk and
            # the acceptor fails the flush acks still waiting (error 7).
            log.critical("stopping without a final flush after a failed fdatasync")
        else:
            self._stop_gracefully()
        return self.exit_code

    # --- events -----------------------------------------------------------------

    def _on_requests(self, _mask: int) -> None:
        Ring.clear_notification(self.requests.data_fd)
        self._drain_requests()

    def _drain_requests(self) -> None:
        records = self.requests.read()
        if not records:
            return
        try:
            start = 0  # a deletion of a topic comes after the produces before it, and before the rest
            for index, (kind, body) in enumerate(records):
                if kind == messages.KIND_DELETE_TOPIC:
                    if index > start:
                        self.handler.handle(records[start:index])
                    topic = messages.decode_topic(body)
                    self.handler.release_held(topic=topic)
                    self._removal.remove(topic)
                    start = index + 1
            if start < len(records):
                self.handler.handle(records[start:] if start else records)  # copies what it keeps
        finally:
            del records
            self.requests.release()

    def _on_answer_space(self, _mask: int) -> None:
        Ring.clear_notification(self.answers.space_fd)

    def _on_flushed(self, _mask: int) -> None:
        self.handle_flush_results(self.flusher.collect())

    def forget_postponed(self, partition_log) -> None:
        self._postponed.discard(partition_log)

    def handle_flush_results(self, results) -> None:
        """Act on completed flushes (``Flusher.collect``) and a completed checkpoint write."""
        now = wall_clock_ms()  # the date of the last flush, for the metrics
        for partition_log, error in results:
            if isinstance(error, LogRemovedError):
                log.critical("%s", partition_log.failure)  # once: a failed log is not flushed again
                self._postponed.discard(partition_log)
                self.handler.log_failed(partition_log)
                continue
            if isinstance(error, FlushPostponedError):
                self._postponed.add(partition_log)
                self._postponed_log.event(partition_log, logging.WARNING, f"{error}; flushing again later")
                continue
            if error is not None:
                log.critical("%s; exiting so that recovery checks the log", error)
                self.exit_with(EXIT_FLUSH_FAILED)
                continue
            if self._postponed:
                self._postponed.discard(partition_log)
                self._postponed_log.ended(partition_log, f"flushing {partition_log.directory}")
            self.publisher.flushed(partition_log, now)
            self.handler.flushed(partition_log)
            self.replication.flushed(partition_log)
        if self.flusher.checkpoint_result is not None:
            points, error = self.flusher.checkpoint_result
            self.flusher.checkpoint_result = None
            if error is None:
                self._checkpointed = points
                if self._checkpoint_failures.active:
                    self._checkpoint_failures.ended("checkpoint", f"writing {self._checkpoint_path}")
            else:
                self._checkpoint_failures.event("checkpoint", logging.ERROR, f"writing the recovery points to "
                                                               f"{self._checkpoint_path} failed: {error}")

    # --- duties -----------------------------------------------------------------

    def _queue_answer(self, kind: int, parts: tuple) -> None:
        self._outbox.append((kind, parts))

    queue_answer = _queue_answer

    def _send_answers(self) -> None:
        outbox = self._outbox
        ring = self.answers
        while outbox:
            kind, parts = outbox[0]
            if not ring.try_write(kind, *parts):
                break
            outbox.popleft()
        ring.publish()

    def _flush_due_logs(self, now: int) -> None:
        for partition_log in self.logs.logs_due_for_flush(now):
            self.flusher.request(partition_log)
        for partition_log in list(self._postponed):  # their acks wait: try again
            self.flusher.request(partition_log)

    def _recovery_points_now(self) -> dict:
        return {(partition_log.topic, partition_log.partition):
                stored(partition_log.recovery_point)
                for partition_log in self.logs.logs()}

    def checkpoint_now(self) -> None:
        """Write the recovery points at once (a truncation lowered one): no restart may
        trust a point above what the log now holds."""
        points = self._recovery_points_now()
        try:
            write_checkpoint(self._checkpoint_path, points)
        except OSError as exc:
            log.error("writing the recovery points to %s failed: %s", self._checkpoint_path, exc)
            return
        self._checkpointed = points

    def _checkpoint(self, _now: int) -> None:
        """Hand the recovery points to the flusher threads for writing, if they moved."""
        if self.flusher.checkpoint_in_flight is not None:
            return
        points = self._recovery_points_now()
        if points == self._checkpointed:
            return
        self.flusher.write_checkpoint(self._checkpoint_path, points)

    def _apply_retention(self, _now: int) -> None:
        now = wall_clock_ms()  # retention compares segment modification dates
        for partition_log in self.logs.logs():
            if partition_log.apply_retention(now):
                self.publisher.publish(partition_log)

    def reload(self, properties: dict) -> None:
        config, _ = config_from_properties(properties)
        self.config = config
        self.handler.config = config
        self.replication.config = config
        if self.fetcher is not None:
            self.fetcher.config = config
        self.logs.reconfigure(functools.partial(topic_log_config, config))
        set_level(config.log_level)
        now = monotonic_ms()
        self._make_timers(now)
        log.info("reloaded: flush every %d messages or %d ms, retention %d hours",
                 config.log_flush_interval, config.log_default_flush_interval_ms, config.log_retention_hours)
        # The timers start again from now: without this, each reload would put retention
        # off by a whole log.cleanup.interval.mins (reloads more often than that: never),
        # and a retention an operator just lowered would wait for it too.
        self._apply_retention(now)

    def _stop_gracefully(self) -> None:
        """Handle what is queued, flush every log, answer, close. A failed flush keeps
        the exit code that says so."""
        if self.fetcher is not None:
            self.fetcher.close()
        self._drain_requests()
        self.handler.release_held(final=True)  # what still waits is refused, or taken if it may be
        for partition_log, error in self.flusher.wait_idle():
            if error is not None:
                log.critical("%s; stopping without a final flush", error)
                self.exit_code = EXIT_FLUSH_FAILED
                return
            self.handler.flushed(partition_log)
        for partition_log in list(self.logs.logs()):
            if partition_log.failure is not None:
                continue  # its files are gone; its produces were refused
            try:
                partition_log.flush()
            except Exception as exc:
                log.critical("final flush of %s failed: %s", partition_log.directory, exc)
                self.exit_code = EXIT_FLUSH_FAILED
                continue
            self.publisher.flushed(partition_log, wall_clock_ms())
            self.handler.flushed(partition_log)
        self._send_answers()
        self.flusher.stop()
        try:
            write_checkpoint(self._checkpoint_path, self._recovery_points_now())
        except OSError as exc:
            log.error("writing the recovery points to %s failed: %s", self._checkpoint_path, exc)
        try:
            self.logs.close()
        except Exception as exc:
            log.critical("closing logs failed: %s", exc)
            self.exit_code = EXIT_FLUSH_FAILED
        log.info("stopped: %d partition logs flushed and closed", len(self.publisher))


def topic_log_config(config, topic: str):
    """The topic's log settings: the broker's, with those a modern client gave the
    topic at creation (``segments.topic_configs``)."""
    found = topic_configs.read(config.log_dir, topic)
    return topic_configs.applied(config.log_config_for(topic), found["configs"] if found else {})
