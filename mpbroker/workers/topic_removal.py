"""A worker deleting its logs of a topic (``KIND_DELETE_TOPIC`` from the acceptor).

The record comes through the request ring behind every produce the acceptor routed
before it, so those are appended first and deleted with the rest; the acceptor
routes nothing to the topic until the deletion is over. Each log of the topic leaves
everything that refers to it, in this order: the produces waiting for a flush are
answered (their sets were appended before the deletion) and its idempotent
producers forgotten, its replica state (durability-2 produces refused, a follower's
fetching stopped), the flush in flight waited for (a flusher thread may be syncing
its files; the recovery-point checkpoint write too), the partition table entry (now
``Role.DELETED`` in a new generation, which the acceptor's caches and the registrar
read), and last its files: closed without a flush, the directory renamed out of the
way and removed (``segments.topic_deletion``). Then the recovery points are written
without it, at once: a partition made anew under the same name later must not be
recovered from the old one's point. The answer is ``KIND_TOPIC_DELETED``; a failure
on disk is logged and not answered, so the deletion stays undone (its marker stays,
and the next start finishes it).
"""

import logging

from mpbroker.ipc import messages

log = logging.getLogger(__name__)


class TopicRemoval:
    def __init__(self, worker):
        self._worker = worker  # the PartitionWorker: its logs, publisher, flusher, handler, replication

    def remove(self, topic: str) -> None:
        worker = self._worker
        doomed = [partition_log for partition_log in worker.logs.logs() if partition_log.topic == topic]
        for partition_log in doomed:
            worker.handler.forget(partition_log)
            worker.replication.forget(partition_log)
            worker.forget_postponed(partition_log)
        if doomed:
            worker.handle_flush_results(worker.flusher.wait_for(doomed, checkpoint=True))
        failed = None
        for partition_log in doomed:
            worker.publisher.remove(partition_log)
            try:
                worker.logs.remove(topic, partition_log.partition)
            except OSError as exc:
                failed = exc
        try:
            worker.logs.remove_leftovers(topic)
        except OSError as exc:
            failed = exc
        if failed is not None:
            log.error("deleting the logs of topic %s failed: %s; the deletion is finished at the next start",
                      topic, failed)
            return
        if doomed:
            worker.checkpoint_now()
        worker.queue_answer(messages.KIND_TOPIC_DELETED, messages.encode_topic(topic))
        if doomed:
            log.info("deleted topic %s: %d partition logs", topic, len(doomed))
