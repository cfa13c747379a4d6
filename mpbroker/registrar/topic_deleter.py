"""The registrar's part in deleting topics from a ZooKeeper cluster
(``registry.topic_deletion``): this broker's share, and the controller's.

Every registrar step (``step``):

- it reads the topics marked for deletion (``marked``: the registrar stops
  registering them, ``replica_roles`` stops replicating them and the cluster view
  leaves them out of Metadata);
- for each marked topic this broker has not finished yet, it asks the acceptor to
  delete the broker's logs of it (``delete_local``, through the supervisor; asked
  again every ``ASK_AGAIN_S`` until answered: the acceptor may be restarting), and
  when the acceptor answers (``local_deleted``) it deletes the broker's own
  registration of the topic and reports it done;
- on the controller, each marked topic whose brokers have all reported is removed
  (``registry.topic_deletion.remove``);
- DeleteTopics requests the acceptor passed on (``request``) mark their topics and
  are answered (``topics_deleted``) when each topic is gone from
  ``/brokers/topics``, UNKNOWN_TOPIC_OR_PARTITION when it never was there, or
  REQUEST_TIMED_OUT when ``timeout_ms`` ran out first.
"""

import logging
import time

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.registry import topic_deletion
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.topic_admin import live_brokers

log = logging.getLogger(__name__)

ASK_AGAIN_S = 5.0
NONE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, INVALID_TOPIC_EXCEPTION = 0, 3, 7, 17  # Kafka's codes


class _Request:
    __slots__ = ("deadline", "results", "unmarked")

    def __init__(self, deadline: float, topics):
        self.deadline = deadline
        self.results = {topic: None for topic in topics}  # None: pending
        self.unmarked = set(topics)  # not marked yet (ZooKeeper was away)


class TopicDeleter:
    def __init__(self, broker_id: int, send_local, answer):
        self.broker_id = broker_id
        self._send_local = send_local  # callable(topic): ask the acceptor to delete this broker's logs
        self._answer = answer  # callable(number, results): the answer of a DeleteTopics request
        self.marked = set()  # the topics marked for deletion, as last read
        self._asked = {}  # topic -> time.monotonic() the acceptor was last asked
        self._done = set()  # marked topics this broker has reported done
        self._locally_deleted = set()  # the acceptor answered: to report at the next step
        self._requests = {}  # number -> _Request

    def request(self, number: int, topics, timeout_ms: int) -> None:
        self._requests[number] = _Request(time.monotonic() + timeout_ms / 1000, topics)

    def local_deleted(self, topic: str) -> None:
        self._locally_deleted.add(topic)

    def step(self, client, registration, controller: bool) -> None:
        """One step (ZooKeeper errors propagate); ``controller``: this broker is the
        controller."""
        self._mark_requested(client)
        self.marked = set(topic_deletion.marked(client))
        self._asked = {topic: when for topic, when in self._asked.items() if topic in self.marked}
        self._done &= self.marked
        for topic in sorted(self._locally_deleted):
            registration.remove_topic(topic)
            if topic in self.marked:
                topic_deletion.report_done(client, topic, self.broker_id)
                self._done.add(topic)
        self._locally_deleted.clear()
        now = time.monotonic()
        for topic in sorted(self.marked - self._done):
            if now - self._asked.get(topic, -ASK_AGAIN_S) >= ASK_AGAIN_S:
                self._asked[topic] = now
                self._send_local(topic)
        if controller and self.marked:
            self._remove_finished(client, live_brokers(client))
        self._answer_requests(client, now)

    def _mark_requested(self, client) -> None:
        for request in self._requests.values():
            for topic in sorted(request.unmarked):
                try:
                    topic_deletion.mark(client, topic)
                    log.info("marked topic %s for deletion", topic)
                except topic_deletion.UnknownTopic:
                    request.results[topic] = UNKNOWN_TOPIC_OR_PARTITION
                except InvalidTopicError:
                    request.results[topic] = INVALID_TOPIC_EXCEPTION
                request.unmarked.discard(topic)

    def _remove_finished(self, client, live) -> None:
        for topic in sorted(self.marked):
            try:
                brokers = topic_deletion.must_report(client, topic, live)
            except LayoutError as exc:
                log.error("%s; removing topic %s anyway once the live brokers deleted it", exc, topic)
                brokers = set(live)
            if brokers is not None:
                missing = brokers - topic_deletion.reported(client, topic)
                if missing:
                    continue
            topic_deletion.remove(client, topic)
            log.info("topic %s deleted from the cluster", topic)

    def _answer_requests(self, client, now: float) -> None:
        for number, request in list(self._requests.items()):
            for topic, result in request.results.items():
                if result is None and topic not in request.unmarked and topic_deletion.gone(client, topic):
                    request.results[topic] = NONE
            if any(result is None for result in request.results.values()) and now < request.deadline:
                continue
            del self._requests[number]
            self._answer(number, {topic: REQUEST_TIMED_OUT if result is None else result
                                  for topic, result in request.results.items()})

    def expire(self, now: float) -> None:
        """Answer the requests whose time is up while ZooKeeper is away."""
        for number, request in list(self._requests.items()):
            if now >= request.deadline:
                del self._requests[number]
                self._answer(number, {topic: REQUEST_TIMED_OUT if result is None else result
                                      for topic, result in request.results.items()})
