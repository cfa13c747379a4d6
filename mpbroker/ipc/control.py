"""Control messages between the supervisor and its children: one JSON object per
datagram over an AF_UNIX SOCK_SEQPACKET socketpair made before fork.

Messages are small and rare; the sender never blocks on a full socket for long, and
a peer that went away reads as ``None``. Every message's name is an ``Op``, defined
here once; which side sends which, and with what fields:

supervisor -> child
    ``stop``; ``reload`` (``properties``: the settings now in force, every key);
    to the acceptor ``worker_down`` (``slot``, ``generation``: fail what is in flight
    to that worker) and ``worker_up`` (``slot``); to the registrar ``register`` (the
    acceptor serves: write the broker's nodes) and ``isr_change`` (a worker's, passed
    on); ``roles`` (the registrar's, passed on): to a worker ``partitions``, the
    replica roles of the partitions it owns; to the acceptor ``topics``, the replicated
    topics and their partition counts; ``cluster`` (the registrar's, passed on to the
    acceptor): what Metadata tells modern clients, ``brokers`` (``[id, host, port]`` of
    each live broker's modern endpoint), ``controller`` and ``topics`` (per replicated
    topic ``[partition, leader, leader_epoch, replicas, isr]``); ``topic_config``
    (the registrar's, passed on to every worker): ``topic``, whose settings file in
    ``log.dir/topic-configs`` changed (apply it to the topic's open logs).
child -> supervisor
    ``ready`` (a worker adds ``slot`` and ``partitions``, the metrics exporter
    ``port``); the acceptor's ``worker_down_ack`` (``slot``, ``generation``); the
    registrar's ``checked`` (``zookeeper``: whether ZooKeeper answered the broker-id
    check) and ``zk_state`` (its connection and registration, for the status);
    the registrar's ``roles`` (``topics``: every replicated topic and its partition
    count, when they changed; ``partitions``: the partitions of which this broker is a
    replica whose state changed, each ``{topic, partition, role, leader, host, port,
    leader_epoch, isr, replicas, version, record_batches}``, role ``leader``, ``follower`` or
    ``none``); a worker's ``isr_change`` (``topic``, ``partition``, ``leader_epoch``,
    ``isr``, ``version``: the leader asks for the ISR to be written, conditional on
    the state node's version); the acceptor's ``create_topic`` (``topic``,
    ``partitions``: a produce named a topic nobody has, and
    ``default.replication.factor`` > 1 makes it a replicated one; ``record_batches``:
    a modern client's, in the record-batch format; ``replication_factor`` when it
    asked for one; ``configs``, the topic-level settings CreateTopics gave, checked),
    passed on to the registrar; the registrar's ``cluster`` and ``topic_config``.
topic deletion on a ZooKeeper cluster (each passed on by the supervisor)
    the acceptor's ``delete_topics`` (``number``, ``topics``, ``timeout_ms``: a
    DeleteTopics to carry out in the cluster) to the registrar, which answers
    ``topics_deleted`` (``number``, ``results``: topic -> Kafka error code) to the
    acceptor; the registrar's ``delete_local`` (``topic``: delete this broker's logs of
    a topic marked for deletion) to the acceptor, which answers ``local_deleted``
    (``topic``) once every worker did.
"""

import enum
import json
import socket

MAX_MESSAGE_BYTES = 1 << 20


class Op(enum.StrEnum):
    """The name of a control message (its ``"op"`` field on the wire)."""

    STOP = "stop"
    RELOAD = "reload"
    WORKER_DOWN = "worker_down"
    WORKER_UP = "worker_up"
    REGISTER = "register"
    READY = "ready"
    WORKER_DOWN_ACK = "worker_down_ack"
    CHECKED = "checked"
    ZK_STATE = "zk_state"
    ROLES = "roles"
    ISR_CHANGE = "isr_change"
    CREATE_TOPIC = "create_topic"
    CLUSTER = "cluster"
    TOPIC_CONFIG = "topic_config"
    DELETE_TOPICS = "delete_topics"
    TOPICS_DELETED = "topics_deleted"
    DELETE_LOCAL = "delete_local"
    LOCAL_DELETED = "local_deleted"


class ControlChannel:
    """One end of a supervisor <-> child channel."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def pair(cls):
        """``(supervisor end, child end)``."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(parent), cls(child)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, op: Op, **fields) -> bool:
        """Send one message; False if the peer is gone."""
        try:
            self.sock.send(json.dumps({"op": op, **fields}).encode())
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            return False

    def receive(self):
        """The next message (blocking unless the socket is non-blocking), or None at EOF."""
        data = self.sock.recv(MAX_MESSAGE_BYTES)
        if not data:
            return None
        return json.loads(data)

    def receive_all(self) -> list:
        """Every message waiting now (non-blocking); a trailing None means EOF."""
        messages = []
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return messages
            except (ConnectionResetError, OSError):
                messages.append(None)
                return messages
            if not data:
                messages.append(None)
                return messages
            messages.append(json.loads(data))

    def close(self) -> None:
        self.sock.close()
