"""The acceptor's side of deleting a topic on this broker: the one place that starts
a deletion, tells every worker and notes when all of them are done.

A deletion (asked by DeleteTopics on a broker alone, or by the registrar on a
ZooKeeper cluster) first writes the topic's marker in ``log.dir``, durably
(``segments.topic_deletion``): from then on the deletion happens even if the broker
dies (the next start finishes it). Then nothing more is routed to the topic (a
produce gets "unknown topic or partition"; ``RequestHandlers.begin_deletion``), and
every worker gets ``KIND_DELETE_TOPIC`` through its ring, behind whatever was routed
to it before: those produces are appended, then deleted with the rest. Each worker
deletes its logs of the topic (``workers.topic_removal``) and answers
``KIND_TOPIC_DELETED``. When every worker has, the topic's settings and marker go, the
topic may be made again from nothing, and ``on_deleted(topic)`` says so (the waiting
DeleteTopics is answered, or the registrar told).

A worker that is down gets the record once it is back (``worker_up``); one that dies
before answering is asked again the same way (its successor may have opened the logs
it had not deleted yet, or finds none and answers at once). A respawned acceptor
takes up every deletion whose marker is still there (``resume``).
"""

import logging

from mpbroker.ipc import messages
from mpbroker.segments import topic_deletion

log = logging.getLogger(__name__)


class TopicDeletions:
    def __init__(self, log_dir: str, router, legacy_handlers, on_deleted):
        self._log_dir = log_dir
        self._router = router
        self._legacy = legacy_handlers  # RequestHandlers: begin_deletion, end_deletion
        self._on_deleted = on_deleted  # callable(topic): every worker has deleted its logs of it
        self._waiting = {}  # topic -> worker slots that have not answered yet
        self._unsent = {}  # topic -> worker slots to tell once they are up

    def deleting(self, topic: str) -> bool:
        return topic in self._waiting

    def delete(self, topic: str) -> None:
        """Begin deleting ``topic`` (nothing if it is under way already); OSError if its
        marker cannot be written (nothing begins then)."""
        if topic in self._waiting:
            return
        topic_deletion.mark(self._log_dir, topic)
        self._legacy.begin_deletion(topic)
        self._waiting[topic] = {route.slot for route in self._router.routes}
        self._unsent[topic] = set()
        log.info("deleting topic %s", topic)
        for route in self._router.routes:
            self._tell(route, topic)

    def resume(self) -> None:
        """Take up the deletions a previous acceptor began (their markers are there)."""
        for topic in topic_deletion.marked(self._log_dir):
            self.delete(topic)

    def _tell(self, route, topic: str) -> None:
        if not self._router.notify(route, messages.KIND_DELETE_TOPIC, messages.encode_topic(topic)):
            self._unsent[topic].add(route.slot)

    def on_deleted(self, slot: int, topic: str) -> None:
        """Worker ``slot`` has no log of ``topic`` left."""
        waiting = self._waiting.get(topic)
        if waiting is None:
            return
        waiting.discard(slot)
        self._unsent[topic].discard(slot)
        if waiting:
            return
        try:
            topic_deletion.finish(self._log_dir, topic)
        except OSError as exc:  # the marker stays: the next start finishes the deletion
            log.error("finishing the deletion of topic %s: %s", topic, exc)
        del self._waiting[topic]
        del self._unsent[topic]
        self._legacy.end_deletion(topic)
        log.info("deleted topic %s", topic)
        self._on_deleted(topic)

    def worker_down(self, slot: int) -> None:
        """A worker died: what it was asked and did not answer is asked of its successor."""
        for topic, waiting in self._waiting.items():
            if slot in waiting:
                self._unsent[topic].add(slot)

    def worker_up(self, route) -> None:
        for topic, unsent in self._unsent.items():
            if route.slot in unsent:
                unsent.discard(route.slot)
                self._tell(route, topic)
