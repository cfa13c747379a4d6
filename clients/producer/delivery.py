"""The delivery of a send's produce requests (``produce_requests``), once the producer
grouped its messages: to each broker, or to each partition's current leader for a
replicated topic, with the retries.

In fire-and-forget mode (``acks=none``, 0.7's PRODUCE) a sync producer without hooks
queues a broker's requests on the connection's write-behind queue and returns: a thread
writes them in order, the requests issued while a write is under way sharing the next
write (``write_behind``: one system call per message was most of a batch-1 send's
time). What could not be written is raised by the next ``send`` or ``flush``
(BrokerUnavailableError). A connection that is down is written inline, so a broker that
cannot be reached fails the send at once. In acknowledged mode (``acks=append``,
``flush`` or ``replicated``, PRODUCE_ACKED) the requests are pipelined on the connection
and their answers read in order, and the results say where each set was written.

A request whose partition's worker is restarting (error 7), or whose connection broke,
is sent again after ``retry.backoff.ms``, up to ``num.retries`` times; other errors
raise at once.

A replicated topic's requests go to each partition's current leader
(``mpbroker.clients.core.leaders``). NOT_LEADER, NOT_ENOUGH_REPLICAS, a broken
connection or no leader at all: the request is routed again after up to
``retry.backoff.ms`` (a leader change seen by the watches ends the wait early) and a
fresh read of the leaders, up to ``num.retries`` times; then it fails
(LeaderNotAvailableError, NotLeaderError, NotEnoughReplicasError, BrokerUnavailableError).

Apart from the producer (``producer``: which partition each message goes to) so that
how requests reach the brokers, and what is retried, is read in one place.
"""

import time

from mpbroker.clients.core.errors import (
    LEADER_RETRY_CODES,
    RETRIABLE_CODES,
    BrokerUnavailableError,
    ClientError,
    LeaderNotAvailableError,
    error_for,
)
from mpbroker.clients.producer.produce_requests import SendResult
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode, MPBrokerError
from mpbroker.codec.requests import Durability

DURABILITY = {"append": Durability.APPEND, "flush": Durability.FLUSH, "replicated": Durability.REPLICATED}
LEADER_RETRY = RETRIABLE_CODES | LEADER_RETRY_CODES


class Delivery:
    """Sends a producer's requests. ``brokers``: its ``BrokerConnections``; ``leaders``:
    the leaders of replicated topics (zk.connect), else None; ``write_behind``: sync
    fire-and-forget without hooks (the write-behind queues)."""

    def __init__(self, settings, stats, brokers, leaders, write_behind: bool):
        self.settings = settings
        self.stats = stats
        self.brokers = brokers
        self.leaders = leaders
        self.write_behind = write_behind

    def send_all(self, by_broker: dict, to_leaders: list) -> list:
        """Deliver ``{broker id: [requests]}`` and a replicated topic's ``to_leaders``;
        return SendResults, grouped by broker.

        If some requests fail, the others are still delivered; the first error is raised
        with ``results`` (what was delivered) and ``failed_messages`` set on it."""
        results = []
        first_error = None
        failed = 0
        if to_leaders:
            delivered_before = len(results)
            try:
                self.send_to_leaders(to_leaders, results)
            except Exception as exc:
                delivered = sum(result.messages for result in results[delivered_before:])
                failed += sum(len(request.payloads) for request in to_leaders) - delivered
                first_error = exc
        for broker_id, broker_requests in by_broker.items():
            delivered_before = len(results)
            try:
                self.send_to_broker(broker_id, broker_requests, results)
            except Exception as exc:
                delivered = sum(result.messages for result in results[delivered_before:])
                failed += sum(len(request.payloads) for request in broker_requests) - delivered
                first_error = first_error or exc
                if isinstance(exc, BrokerUnavailableError):
                    self.brokers.metadata.invalidate_all()  # re-probe: a dead broker's partitions drop out
        if first_error is not None:
            first_error.results = results
            first_error.failed_messages = failed
            raise first_error
        return results

    def send_to_broker(self, broker_id: int, requests: list, results: list) -> None:
        """Deliver ``requests`` to one broker, retrying what failed retriably; the
        SendResults of what got through are appended to ``results`` as it goes."""
        lock, connection = self.brokers.connection_for(broker_id)
        if self.write_behind and self._write_behind(broker_id, lock, connection, requests, results):
            return
        last_error = None
        for attempt in range(self.settings.num_retries + 1):
            if attempt:
                self.stats.retries += len(requests)
                time.sleep(self.settings.retry_backoff_ms / 1000)
            try:
                with lock:
                    requests = self._send_once(connection, broker_id, requests, results)
            except BrokerUnavailableError as exc:
                last_error = exc  # resend them all (a fire-and-forget resend may duplicate)
                continue
            if not requests:
                return
            last_error = BrokerUnavailableError(
                f"{len(requests)} request(s) to broker {broker_id}: partition unavailable (its worker is restarting)")
        raise last_error

    def _write_behind(self, broker_id: int, lock, connection, requests: list, results: list) -> bool:
        """Sync fire-and-forget: queue ``requests`` on the broker's write-behind queue
        (``write_behind``: requests issued while a write is under way share the next
        one); True if queued. False while the connection is down and nothing is queued:
        the caller then writes them itself, so that a broker it cannot reach fails this
        send at once. Raises, first, the failure of earlier queued requests."""
        writer = self.brokers.write_behind_queue(broker_id, lock, connection)
        if writer is None:
            return False
        buffers = []
        messages = 0
        for request in requests:
            buffers += rq.produce_parts(request.topic, request.partition, request.message_set)
            count = len(request.payloads)
            messages += count
            results.append(SendResult(request.topic, broker_id, request.partition, count, None, None))
        writer.submit(buffers, messages)
        self.stats.count_sent(requests)
        return True

    def send_to_leaders(self, requests: list, results: list) -> None:
        """Deliver a replicated topic's ``requests``, each to its partition's current leader
        (see the module docstring); the SendResults of what got through are appended to
        ``results`` as it goes. Raises the last reason a request could not be delivered
        after the retries, or the first error no retry can cure."""
        leaders = self.leaders
        pending = requests
        last_error = refused = None
        for attempt in range(self.settings.num_retries + 1):
            if attempt:
                self.stats.retries += len(pending)
                leaders.wait_for_change(self.settings.retry_backoff_ms / 1000)
                for topic in {request.topic for request in pending}:
                    leaders.refresh(topic)
            by_leader = {}
            retry = []
            for request in pending:
                try:
                    broker = leaders.require_leader(request.topic, request.partition)
                except LeaderNotAvailableError as exc:
                    last_error = exc
                    retry.append(request)
                    continue
                by_leader.setdefault(broker, []).append(request)
            for broker, broker_requests in by_leader.items():
                try:
                    lock, connection = self.brokers.connection_for(broker.id, broker)
                    writer = self.brokers.writers.get(broker.id)
                    if writer is not None:  # a topic that became replicated: what was queued goes first
                        writer.flush()
                    with lock:
                        again = self._send_once(connection, broker.id, broker_requests, results, LEADER_RETRY)
                except BrokerUnavailableError as exc:
                    last_error = exc  # the leader died or moved: resend them all once it is known again
                    retry.extend(broker_requests)
                    self.brokers.forget(broker.id)  # the next try connects afresh, without a back-off
                    continue
                except (MPBrokerError, ClientError) as exc:  # refused for good (too large, invalid, ...)
                    refused = refused or exc
                    continue
                if again:
                    last_error = error_for(again[-1].error, f"produce to {again[-1].topic}-{again[-1].partition} "
                                                            f"(broker {broker.id})")
                retry.extend(again)
            pending = retry
            if not pending:
                break
        if pending:
            raise last_error
        if refused is not None:
            raise refused

    def _send_once(self, connection, broker_id: int, requests: list, results: list,
                   retry_codes=RETRIABLE_CODES) -> list:
        """One attempt; appends SendResults of what got through; returns what to retry
        (the requests answered with an error in ``retry_codes``)."""
        acks = self.settings.acks
        buffers = []
        if acks == "none":
            for request in requests:
                buffers.extend(rq.produce_parts(request.topic, request.partition, request.message_set))
            connection.send(*buffers)
            self.stats.count_sent(requests)
            results.extend(SendResult(r.topic, broker_id, r.partition, len(r.payloads), None, None)
                           for r in requests)
            return []
        durability = DURABILITY[acks]
        for request in requests:
            buffers.extend(rq.produce_acked_parts(durability, request.topic, request.partition, request.message_set))
        connection.send(*buffers)  # pipelined: answers come back in request order
        acknowledged, retry, failure = [], [], None
        for index, request in enumerate(requests):
            try:
                ack = rs.decode_produce_ack(connection.receive())
            except BrokerUnavailableError:
                retry.extend(requests[index:])  # their answers went with the connection
                break
            if ack.error == ErrorCode.NO_ERROR:
                acknowledged.append(request)
                results.append(SendResult(request.topic, broker_id, ack.partition, len(request.payloads),
                                          ack.offset, ack.next_offset))
            elif ack.error in retry_codes:
                request.error = ack.error
                retry.append(request)
            elif failure is None:
                failure = error_for(ack.error, f"produce to {request.topic}-{request.partition}")
        self.stats.count_sent(acknowledged)
        if failure is not None:
            raise failure
        return retry
