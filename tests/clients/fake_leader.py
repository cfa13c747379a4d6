"""A narrow stand-in for a broker, for the one case real brokers cannot show yet: a
broker answering NOT_LEADER (error 9). A real TCP server in a thread decodes each
request with the codec, records it and sends what ``answer(request)`` returns (a
whole response frame); registered in a real ZooKeeper by the test as a broker and
named leader in a partition state the test writes (no controller runs: no real broker
does)."""

import socket
import struct
import threading

from mpbroker.clients.core.zk_registry import read_brokers
from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.errors import ErrorCode
from mpbroker.registry import layout, replication
from mpbroker.registry.replication import PartitionState
from tests.clients.helpers import wait_for

_LENGTH = struct.Struct(">i")


class FakeBroker:
    def __init__(self, broker_id: int, answer):
        self.id = broker_id
        self.answer = answer
        self.requests = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        with sock:
            while True:
                head = _read(sock, 4)
                if head is None:
                    return
                body = _read(sock, _LENGTH.unpack(head)[0])
                if body is None:
                    return
                request = rq.decode_request(body)
                self.requests.append(request)
                reply = self.answer(request)
                if reply is None:  # no answer (PRODUCE), or close the connection
                    if not isinstance(request, rq.ProduceRequest):
                        return
                    continue
                sock.sendall(reply)

    def register(self, client) -> None:
        client.create(layout.broker_path(self.id), f"fake:127.0.0.1:{self.port}".encode(), ephemeral=True,
                      makepath=True)

    def close(self):
        self._closed = True
        self._listener.close()


def _read(sock, count: int):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def ack(request) -> bytes:
    """A PRODUCE_ACKED answer: appended at 0."""
    return rs.produce_ack_response(ErrorCode.NO_ERROR, request.partition, 0, len(request.message_set))


def not_leader(request) -> bytes:
    """Error 9 in the shape of the request's answer."""
    if isinstance(request, rq.ProduceAckedRequest):
        return rs.produce_ack_response(ErrorCode.NOT_LEADER, request.partition, -1, -1)
    if isinstance(request, rq.MultiFetchRequest):
        parts = [rs.response_header(ErrorCode.NOT_LEADER, 0) for _ in request.fetches]
        return rs.multifetch_header([0] * len(parts)) + b"".join(parts)
    return rs.error_response(ErrorCode.NOT_LEADER)


def replicated_topic(client, topic: str, leaders: dict) -> None:
    """Write a replicated topic whose partition p has the one replica ``leaders[p]``, and
    its states, as topic_admin and the controller would."""
    client.create(layout.topic_path(topic), replication.assignment_value({p: [b] for p, b in leaders.items()}),
                  makepath=True)
    for partition, broker_id in leaders.items():
        set_leader(client, topic, partition, broker_id, create=True)


def set_leader(client, topic: str, partition: int, broker_id: int, *, create: bool = False, epoch: int = 0) -> None:
    value = PartitionState(broker_id, epoch, (broker_id,), 1).value()
    path = replication.partition_state_path(topic, partition)
    if create:
        client.create(path, value, makepath=True)
    else:
        client.set(path, value)


def wait_registered(client, *ids) -> None:
    wait_for(lambda: set(ids) <= set(read_brokers(client)), 10, what="the fake brokers registered")
