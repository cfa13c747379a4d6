"""The follower side of replication, in the worker that owns the partitions: fetch the
leader's bytes over the broker port and append them, byte for byte, to the local log.

Why here and not in a process of its own: the worker owns the partition's log (one
writer per log, the rule every other path keeps), so the bytes go from the socket to
the log with no ring and no copy between processes, and the truncation, the leader
epochs and the append happen where the log lives. The connections are non-blocking
sockets in the worker's own event loop, beside its request ring.

Per leader (its host and port) and per ``num.replica.fetchers`` share of the
partitions, one connection (``LeaderLink``) carries one request at a time:

1. a partition that just started following (a new leader epoch) first asks the leader
   where its own latest epoch ended in the leader's log (LEADER_EPOCH_END) and cuts
   its log there (``Log.truncate_to``, durable before anything new is appended): the
   bytes past that point were never the new leader's (KIP-101/279). A log without
   epochs has nothing the leader vouched for: it is emptied;
2. then REPLICA_FETCH, one request for all its partitions from its log ends (which
   tell the leader where the follower is), held by the leader up to
   ``REPLICA_FETCH_WAIT_MS`` while there is nothing new. Each part's bytes are
   checked (lengths and CRCs, ``validate_message_set``), cut to whole messages,
   appended (``Log.append_many``) under the epoch the leader says they were written
   in (``Log.assign_epoch``), and the follower's high watermark follows the leader's.
   A record-batch log (a topic for modern clients, ``record_format``) gets the same
   with ``records.scan.scan_batches`` (lengths, magic 2, CRC-32C), cut to whole
   batches: bytes that end inside a batch are a batch larger than the fetch (the
   fetch size doubles, as for a 0.7 message), bad bytes are logged and fetched again
   after a pause; the message count the flush policy sees is the batches' records
   (their headers' count), as the leader counted them when it appended.

A position below the leader's log start (its retention ran) starts the log afresh
there (``Log.truncate_fully_and_start_at``); one beyond the leader's end goes back to
step 1. NOT_LEADER and the epoch errors wait ``RETRY_MS`` and try again (the roles
that will change the leader are on their way). A connection that fails or stays
silent for ``socket_timeout_ms`` is closed and made again after ``RETRY_MS``.
"""

import errno
import logging
import selectors
import socket
import struct

from mpbroker.clock import monotonic_ms
from mpbroker.codec import requests as rq
from mpbroker.codec import responses
from mpbroker.codec.errors import ErrorCode, MPBrokerError
from mpbroker.codec.message_set import TruncatedMessageError, validate_message_set
from mpbroker.ipc.partition_table import Role
from mpbroker.records.scan import scan_batches
from mpbroker.segments.leader_epochs import UNDEFINED

log = logging.getLogger(__name__)

REPLICA_FETCH_WAIT_MS = 500
RETRY_MS = 100
RECEIVE_BYTES = 1 << 20
ANSWER_HEAD_BYTES = 64  # more than the headers of an answer and of each of its parts
_SIZE = struct.Struct(">i")


class LeaderLink:
    """One connection to a leader and the partitions fetched over it."""

    def __init__(self, fetcher, address: tuple):
        self.fetcher = fetcher
        self.address = address
        self.replicas = set()
        self.sock = None
        self.connected = False
        self.in_flight = None  # ("epoch", replica, leader epoch) or ("fetch", [(replica, epoch, offset)])
        self.sent_ms = 0
        self.head = bytearray()  # an answer's first bytes while fewer than its size's four came
        self.body = None  # the answer being received (after its size), once its size is known
        self.filled = 0  # bytes of ``body`` received so far
        self.wanted = 0  # the size of the answer ``body`` takes in (``body`` may be shorter: it grows)
        self.answer_limit = 0  # the most bytes the answer to the request in flight may have
        self.retry_timer = None

    # --- the connection ------------------------------------------------------------

    def kick(self) -> None:
        """Send the next request if nothing is in flight (connecting first if need be)."""
        if self.retry_timer is not None or self.in_flight is not None:
            return
        if not self.replicas:
            self.close()
            return
        if self.sock is None:
            self._connect()
            return
        if self.connected:
            self._send_next()

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self.address[0] else socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.connected = False
        self.sent_ms = monotonic_ms()
        try:
            sock.connect(self.address)
        except BlockingIOError:
            pass
        except OSError as exc:
            self._failed(f"cannot connect: {exc.strerror or exc}")
            return
        self.fetcher.selector.register(sock, selectors.EVENT_WRITE, self._on_event)

    def _on_event(self, mask: int) -> None:
        if self.sock is None:  # closed by an earlier handler of the same round of events
            return
        if not self.connected:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._failed(f"cannot connect: {errno.errorcode.get(error, error)}")
                return
            self.connected = True
            self.fetcher.selector.modify(self.sock, selectors.EVENT_READ, self._on_event)
            self._send_next()
            return
        if mask & selectors.EVENT_READ:
            self._receive()

    def _failed(self, why: str) -> None:
        self.fetcher.throttled(self.address, f"replica fetch from {self.address[0]}:{self.address[1]}: {why}; "
                                             f"again in {RETRY_MS} ms")
        self.close()
        self._retry_later()

    def _retry_later(self) -> None:
        if self.retry_timer is None:
            self.retry_timer = self.fetcher.timers.once(RETRY_MS, self._retry)

    def _retry(self, _now: int) -> None:
        self.retry_timer = None
        self.kick()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.fetcher.selector.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self.sock.close()
        self.sock = None
        self.connected = False
        self.in_flight = None
        self.head = bytearray()
        self.body = None

    def overdue(self, now: int) -> bool:
        limit = self.fetcher.socket_timeout_ms + (REPLICA_FETCH_WAIT_MS if self.in_flight else 0)
        return self.sock is not None and (self.in_flight is not None or not self.connected) \
            and now - self.sent_ms > limit

    # --- requests --------------------------------------------------------------------

    def _more_waiting(self) -> bool:
        """Whether bytes past the answer just received are already in the socket (the
        leader answers each request once, so they would be taken for the next answer)."""
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False  # the next read says what is wrong with the connection

    def _send_next(self) -> None:
        fetcher = self.fetcher
        for replica in self.replicas:
            if replica.needs_truncation:
                latest = replica.log.leader_epochs.latest
                if latest is None:  # nothing here the leader vouched for
                    if not fetcher.truncate(replica, replica.log.log_start):
                        self._retry_later()  # after its flush
                        return
                    continue
                self._send(rq.encode_leader_epoch_end(fetcher.broker_id, replica.topic, replica.partition,
                                                      replica.leader_epoch, latest.epoch),
                           ("epoch", replica, replica.leader_epoch))
                return
        parts = [(replica, replica.leader_epoch, replica.log.log_end) for replica in self.replicas]
        if not parts:
            return
        sizes = [fetcher.fetch_size(replica) for replica, _, _ in parts]
        frame = rq.encode_replica_fetch(fetcher.broker_id, REPLICA_FETCH_WAIT_MS, [
            (replica.topic, replica.partition, epoch, offset, size)
            for (replica, epoch, offset), size in zip(parts, sizes)])
        self._send(frame, ("fetch", parts), sum(sizes) + ANSWER_HEAD_BYTES * (len(parts) + 1))

    def _send(self, frame: bytes, in_flight, answer_limit: int = ANSWER_HEAD_BYTES) -> None:
        try:
            sent = self.sock.send(frame)  # small requests: all of it goes, or the connection is in trouble
        except OSError as exc:
            self._failed(f"send failed: {exc.strerror or exc}")
            return
        if sent != len(frame):
            self._failed("the socket took only part of a request")
            return
        self.in_flight = in_flight
        self.answer_limit = answer_limit
        self.sent_ms = monotonic_ms()

    def _receive(self) -> None:
        """Take in the answer: its first bytes with one ``recv``; when that was not all
        of it, the rest straight into one buffer for the answer (``recv_into``, the buffer
        grown towards the answer's size as bytes come), so the bytes the log gets were
        copied out of the socket once, not gathered piece by piece."""
        body = self.body
        try:
            if body is None:
                chunk = self.sock.recv(RECEIVE_BYTES)
                got = len(chunk)
            else:
                got = self.sock.recv_into(memoryview(body)[self.filled:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._failed(f"receive failed: {exc.strerror or exc}")
            return
        if not got:
            self._failed("the leader closed the connection")
            return
        if body is None:
            data = self.head + chunk if self.head else chunk
            if len(data) < 4:
                self.head = bytearray(data)
                return
            self.head = bytearray()
            (wanted,) = _SIZE.unpack_from(data)
            if self.in_flight is None or not 0 <= wanted <= self.answer_limit:
                self._failed(f"an answer of {wanted} bytes" if self.in_flight else "an answer nobody asked for")
                return
            received = len(data) - 4
            if received > wanted:
                self._failed("the leader sent more than one answer")
                return
            if received < wanted:
                # Room for what came and as much again (at least RECEIVE_BYTES), grown as more
                # comes: a size alone, from a broken or hostile peer, commits no memory.
                self.body = bytearray(min(wanted, max(2 * received, RECEIVE_BYTES)))
                self.body[:received] = memoryview(data)[4:]
                self.filled, self.wanted = received, wanted
                return
            frame = memoryview(data)[4:]
        else:
            self.filled += got
            if self.filled < self.wanted:
                if self.filled == len(body):
                    body += bytes(min(len(body), self.wanted - len(body)))  # twice as large, at most the answer
                return
            if self._more_waiting():  # recv_into took exactly the answer: the rest is still in the socket
                self._failed("the leader sent more than one answer")
                return
            frame, self.body = body, None
        in_flight, self.in_flight = self.in_flight, None
        try:
            again = self.fetcher.handle_answer(in_flight, frame)
        except (MPBrokerError, ValueError) as exc:  # a malformed answer
            self._failed(f"bad answer: {exc}")
            return
        if again:
            self._send_next()
        else:
            self._retry_later()


class ReplicaFetcher:
    def __init__(self, worker, broker_id: int, config, manager, publisher, flusher, throttled_log, truncated,
                 may_checkpoint=lambda: True):
        self.worker = worker
        self.selector = worker.selector
        self.timers = worker.timers
        self.broker_id = broker_id
        self.config = config
        self.manager = manager
        self._publisher = publisher
        self._flusher = flusher
        self._throttled_log = throttled_log
        self._truncated = truncated  # callable(): write the recovery points now (they came down)
        self._may_checkpoint = may_checkpoint  # callable(): no checkpoint write is running on a flusher thread
        self.links = {}  # (address, share) -> LeaderLink
        self._link_of = {}  # Replica -> LeaderLink
        self._fetch_sizes = {}  # Replica -> bytes asked per fetch (grown for a message larger than that)
        self.socket_timeout_ms = config.controller_socket_timeout_ms

    # --- membership --------------------------------------------------------------------

    def follow(self, replica) -> None:
        self.remove(replica)
        share = hash((replica.topic, replica.partition)) % max(1, self.config.num_replica_fetchers)
        key = (replica.address, share)
        link = self.links.get(key)
        if link is None:
            link = self.links[key] = LeaderLink(self, replica.address)
        link.replicas.add(replica)
        self._link_of[replica] = link
        link.kick()

    def remove(self, replica) -> None:
        link = self._link_of.pop(replica, None)
        if link is not None:
            link.replicas.discard(replica)
            if not link.replicas:
                link.close()
                for key, value in list(self.links.items()):
                    if value is link:
                        del self.links[key]

    def check_links(self, now: int) -> None:
        """Close connections whose answer is overdue (the leader stopped, or the network did)."""
        for link in list(self.links.values()):
            if link.overdue(now):
                link._failed(f"no answer within {self.socket_timeout_ms} ms")

    def close(self) -> None:
        for link in self.links.values():
            link.close()
        self.links.clear()
        self._link_of.clear()

    def throttled(self, key, message: str) -> None:
        self._throttled_log.event(key, logging.WARNING, message)

    def fetch_size(self, replica) -> int:
        return self._fetch_sizes.get(replica, self.config.replica_fetch_max_bytes)

    # --- answers -------------------------------------------------------------------------

    def handle_answer(self, in_flight, frame: bytes) -> bool:
        """Act on one answer; True to send the next request at once, False to wait a little."""
        if in_flight[0] == "epoch":
            _, replica, leader_epoch = in_flight
            error, epoch, end_offset = responses.decode_leader_epoch_end(frame)
            if replica.role != Role.FOLLOWER or replica.leader_epoch != leader_epoch:
                return True  # its role changed meanwhile
            if error:
                return False
            return self._truncate_after_epoch_answer(replica, epoch, end_offset)
        parts = responses.decode_replica_fetch(frame)
        sent = in_flight[1]
        if len(parts) != len(sent):
            raise ValueError(f"{len(parts)} parts answer a fetch of {len(sent)}")
        progress = False
        wait = False
        for (replica, epoch, offset), part in zip(sent, parts):
            if replica.role != Role.FOLLOWER or replica.leader_epoch != epoch or replica.log.log_end != offset:
                continue  # changed meanwhile: the next request asks again
            if part.error == ErrorCode.NO_ERROR:
                progress |= self._append(replica, offset, part)
            elif part.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                if offset < part.log_start:
                    if replica.log.flush_in_flight or not self._may_checkpoint():
                        wait = True  # a flusher thread is syncing it, or writing the checkpoint: after that
                        continue
                    log.warning("%s-%d: the leader's log starts at %d, past this replica's end %d: starting "
                                "afresh there", replica.topic, replica.partition, part.log_start, offset)
                    replica.log.truncate_fully_and_start_at(part.log_start)
                    replica.high_watermark = part.log_start
                    self._after_truncation(replica)
                else:
                    replica.needs_truncation = True
                progress = True
            else:
                wait = True  # NOT_LEADER, an epoch the leader does not share yet: the roles will tell
        return progress or not wait

    def _checked(self, partition_log, data) -> tuple:
        """``(valid bytes, messages, truncated, error)`` of what the leader sent: 0.7
        messages, or record batches (counted in records, from their headers, as the
        leader counted them for its flush policy) in a record-batch log."""
        if partition_log.record_batches:
            scanned = scan_batches(data)
            return scanned.valid_bytes, scanned.records, scanned.truncated, scanned.error
        checked = validate_message_set(data, partition_log.config.max_message_size, deep=False)  # the topic's
        return (checked.valid_bytes, checked.messages, isinstance(checked.error, TruncatedMessageError),
                checked.error)

    def _append(self, replica, offset: int, part) -> bool:
        partition_log = replica.log
        data = part.data
        moved = False
        if len(data):
            valid_bytes, messages, truncated, error = self._checked(partition_log, data)
            if valid_bytes == 0:
                if truncated:  # a message (or batch) larger than we asked for
                    size = self.fetch_size(replica)
                    self._fetch_sizes[replica] = min(size * 2, self.config.max_socket_request_bytes)
                    return True
                self.throttled((replica.topic, replica.partition),
                               f"{replica.topic}-{replica.partition}: the leader sent bytes at {offset} that do "
                               f"not check: {error}")
                return False
            latest = partition_log.leader_epochs.latest
            if part.epoch != UNDEFINED and (latest is None or part.epoch > latest.epoch):
                partition_log.assign_epoch(part.epoch, offset)
            chunk = data[:valid_bytes]  # a view of the answer: written as it is
            partition_log.append_many([chunk], messages)
            self._publisher.count(partition_log, messages, len(chunk))
            if partition_log.flush_due():
                self._flusher.request(partition_log)
            moved = True
        high_watermark = min(part.high_watermark, partition_log.log_end)
        if high_watermark != replica.high_watermark or moved:
            replica.high_watermark = high_watermark
            self._publisher.publish(partition_log)
        return True

    def _truncate_after_epoch_answer(self, replica, epoch: int, end_offset: int) -> bool:
        """Cut where our log may stop matching the leader's (KIP-279): ``epoch`` is the
        largest the leader has at or below our latest, ending at ``end_offset`` there.
        If we have that epoch, the logs match up to the smaller of the two ends. If we
        do not, cut at the end of our largest epoch below it and ask again with what is
        then our latest (the logs may part earlier)."""
        partition_log = replica.log
        if epoch == UNDEFINED or end_offset == UNDEFINED:
            cut, again = partition_log.log_start, False  # the leader has no epoch that old: keep nothing
        else:
            mine = partition_log.leader_epochs.end_offset_for(epoch, partition_log.log_end)
            if mine.epoch == UNDEFINED:  # we have no epoch that old either
                cut, again = partition_log.log_start, False
            else:
                cut, again = min(end_offset, mine.start_offset), mine.epoch != epoch
        if not self.truncate(replica, cut):
            return False
        replica.needs_truncation = again and partition_log.leader_epochs.latest is not None
        return True

    def truncate(self, replica, cut: int) -> bool:
        """Cut the log at ``cut``; False if it must wait (a flush of it, or a checkpoint
        write, is in flight: the checkpoint is rewritten right after the cut)."""
        partition_log = replica.log
        if partition_log.flush_in_flight or not self._may_checkpoint():
            return False
        if cut < partition_log.log_start:
            partition_log.truncate_fully_and_start_at(cut)
        else:
            if cut < partition_log.log_end:
                log.warning("%s-%d: truncating from %d to %d (where the leader's log diverges, leader epoch %d)",
                            replica.topic, replica.partition, partition_log.log_end, cut, replica.leader_epoch)
            partition_log.truncate_to(cut)  # at the end too: an epoch that began there holds nothing
        replica.needs_truncation = False
        replica.high_watermark = min(replica.high_watermark, partition_log.log_end)
        self._after_truncation(replica)
        return True

    def _after_truncation(self, replica) -> None:
        """The recovery point came down with the log end: publish it (a respawned worker
        recovers from the table) and write the checkpoint before new bytes go over the
        cut (a restart must not trust a recovery point above it)."""
        self._publisher.publish(replica.log)
        self._truncated()
