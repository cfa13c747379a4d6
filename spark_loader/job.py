"""One load: plan, read in parallel with Spark, write Parquet, commit, report.

1. Take the lock (``state.LoaderState``), finish or clean up what an earlier load left.
2. Plan (``plan``): per (broker, topic, partition) the range from the stored offset
   to the log end now. (The command discovers the brokers, partitions and topics --
   ``discover_source`` -- before it starts Spark, so that an unreachable ZooKeeper or
   an unknown topic fails in seconds.)
3. One Spark task per non-empty range (an RDD with one range per slice): the task
   reads its range (``reader``: fetches, bulk CRC-checked decode, Arrow batches) and
   writes one Parquet file with pyarrow into the load's staging directory, named by
   partition and task attempt. ``collect`` returns one successful attempt per task:
   its ReadStats and file; a failed attempt's file is never moved (Spark retries it).
   Measured: this runs 3x as fast as handing Arrow batches to Spark's own Parquet
   writer (``mapInArrow`` + ``DataFrameWriter``), which converts every row in the JVM.
4. Commit: write the new offsets and the list of staged files to move
   (``state.json``'s atomic rename). Then move each file to
   ``<output>/topic=T/load_date=D/load_id=<id>/``.
5. The summary: messages, bytes, per-partition ranges, gaps, duration, rate.

``MPBROKER_LOADER_CRASH_AT=after_write|after_commit`` makes the load exit hard at that
point (tests prove that a load killed there neither loses nor repeats data).
"""

import datetime
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field

from mpbroker.spark_loader.plan import LoadSource, PartitionRange, discover, make_plan, partition_key, topics_of
from mpbroker.spark_loader.reader import ReadStats, write_partition_file
from mpbroker.spark_loader.state import LoaderState

log = logging.getLogger(__name__)

CRASH_ENV = "MPBROKER_LOADER_CRASH_AT"


@dataclass
class LoadOptions:
    output: str
    topics: list = field(default_factory=list)
    whitelist: str = ""
    broker_list: str = ""
    zookeeper: str = ""
    max_bytes_per_partition: int = 0
    fetch_size: int = 4 * 1024 * 1024
    zk_timeout_ms: int = 6000
    allow_missing_topics: bool = False  # a named topic that does not exist (yet) is a warning, not an error


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        log.error("crashing at %s (%s)", name, CRASH_ENV)
        logging.shutdown()
        os._exit(17)


def discover_source(options: LoadOptions, stored_offsets: dict | None = None) -> LoadSource:
    """The brokers and partitions ``options`` name (``plan.discover``): what the command
    checks before it starts Spark. Close names for an unknown topic are also looked for
    among the topics the output holds (``stored_offsets``, read from its state if None)."""
    if stored_offsets is None:
        stored_offsets = LoaderState(options.output).read()["offsets"]
    return discover(broker_list=options.broker_list, zookeeper=options.zookeeper, topics=options.topics,
                    whitelist=options.whitelist, zk_timeout_ms=options.zk_timeout_ms,
                    allow_missing_topics=options.allow_missing_topics, loaded_topics=topics_of(stored_offsets))


def run_load(spark, options: LoadOptions, source: LoadSource | None = None) -> dict:
    """Run one load with ``spark``; return its summary (also written to
    ``<output>/_mpbroker/loads/<load id>.json``). ``source``: the brokers and partitions
    if already discovered (``discover_source``), else they are discovered here."""
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    load_id = started_at.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
    load_date = started_at.strftime("%Y-%m-%d")
    state = LoaderState(options.output)
    state.lock()
    try:
        for line in state.recover():
            log.warning("%s", line)
        stored = state.read()["offsets"]
        if source is None:
            source = discover_source(options, stored)
        ranges = make_plan(source, stored, options.max_bytes_per_partition)
        todo = [part for part in ranges if part.start < part.end]
        log.info("load %s: %d partitions, %d with new data, %d bytes of log to read", load_id, len(ranges),
                 len(todo), sum(part.end - part.start for part in todo))
        results = _write_parquet(spark, todo, state.staging(load_id), load_date, options.fetch_size) if todo else {}
        stats = {key: read for key, (read, _) in results.items()}
        missing = [part.key for part in todo if part.key not in stats]
        if missing:
            raise RuntimeError(f"no result from the tasks of {', '.join(missing)}; nothing committed")
        for part in todo:
            if stats[part.key].messages == 0:
                log.warning("%s did not advance: its next message ends past the load's end %d "
                            "(--max-bytes-per-partition smaller than one message or compressed set?)",
                            part.key, part.end)
        _crash_point("after_write")
        offsets = dict(stored)
        for part in ranges:
            offsets[part.key] = stats[part.key].next_offset if part.key in stats else part.start
        moves = _moves(state, load_id, load_date, [name for _, name in results.values() if name])
        state.sync_dirs({os.path.dirname(staged) for staged, _ in moves})  # the staged names survive a power cut
        state.write({"offsets": offsets, "last_load": load_id,
                     "moving": {"load_id": load_id, "moves": moves} if moves else None})
        _crash_point("after_commit")
        if moves:
            state.finish_moves(moves)
            state.write({"offsets": offsets, "last_load": load_id, "moving": None})
        shutil.rmtree(state.staging(load_id), ignore_errors=True)
        summary = _summary(load_id, started_at, time.monotonic() - started, ranges, stats)
        state.write_summary(load_id, summary)
        return summary
    finally:
        state.unlock()


def _write_parquet(spark, todo: list, staging: str, load_date: str, fetch_size: int) -> dict:
    """Run one Spark task per range; each writes its Parquet file with pyarrow into
    ``staging`` and returns ``(key, ReadStats, file)``. ``collect`` returns the result
    of exactly one successful attempt per task; files of failed attempts (named by
    attempt) stay in staging and are never moved."""
    context = spark.sparkContext

    def load_partition(rows):
        from pyspark import TaskContext

        attempt = TaskContext.get().taskAttemptId()
        for row in rows:
            part = PartitionRange(*row)
            stats = []
            name = write_partition_file(part, os.path.join(staging, f"topic={part.topic}", f"load_date={load_date}"),
                                        f"part-{part.node}-{attempt}.parquet", fetch_size, stats)
            yield part.key, tuple(stats[0]), name

    plan_rdd = context.parallelize([tuple(part) for part in todo], len(todo))
    context.setJobDescription(f"mpbroker load of {len(todo)} partitions")
    return {key: (ReadStats(*stats), name) for key, stats, name in plan_rdd.mapPartitions(load_partition).collect()}


def _moves(state: LoaderState, load_id: str, load_date: str, files) -> list:
    """(staged file, final path) for each file of the load: under
    ``<output>/topic=T/load_date=D/load_id=<id>/``."""
    moves = []
    for staged in sorted(files):
        topic_dir = os.path.basename(os.path.dirname(os.path.dirname(staged)))  # topic=T
        moves.append((staged, os.path.join(state.output_dir, topic_dir, f"load_date={load_date}",
                                           f"load_id={load_id}", os.path.basename(staged))))
    return moves


def _summary(load_id: str, started_at, duration: float, ranges: list, stats: dict) -> dict:
    partitions = []
    for part in ranges:
        read = stats.get(part.key)
        entry = {"topic": part.topic, "broker": part.broker_id, "partition": part.partition, "start": part.start,
                 "end": read.next_offset if read else part.start, "log_end": part.end,
                 "messages": read.messages if read else 0, "bytes": read.payload_bytes if read else 0}
        if part.gap_from >= 0:
            entry["gap"] = {"from": part.gap_from, "to": part.gap_to}
        partitions.append(entry)
    messages = sum(p["messages"] for p in partitions)
    payload_bytes = sum(p["bytes"] for p in partitions)
    return {
        "load_id": load_id, "started": started_at.isoformat(timespec="seconds"),
        "duration_s": round(duration, 3), "messages": messages, "bytes": payload_bytes,
        "messages_per_s": round(messages / duration) if duration > 0 else 0,
        "mb_per_s": round(payload_bytes / duration / 1e6, 2) if duration > 0 else 0,
        "gaps": [dict(p["gap"], partition=partition_key(p["topic"], p["broker"], p["partition"]))
                 for p in partitions if "gap" in p],
        "partitions": partitions,
    }
