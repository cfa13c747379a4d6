"""A small blocking client over the sans-IO codec, for byte-level broker tests."""

import socket

from mpbroker.codec import requests as rq
from mpbroker.codec import responses as rs
from mpbroker.codec.framing import FrameReader
from mpbroker.codec.message import encode_message_set


class WireClient:
    def __init__(self, port: int, timeout: float = 10.0, host: str = "127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = FrameReader(1 << 30)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> bytes:
        """The next response frame body (after its size); ConnectionError at EOF."""
        while True:
            frame = self.reader.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.reader.feed(data)

    def request(self, data: bytes) -> bytes:
        self.send(data)
        return self.receive()

    def closed_by_broker(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (nothing arrives)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    # --- typed helpers ------------------------------------------------------

    def produce(self, topic: str, partition: int, payloads) -> None:
        self.send(rq.encode_produce(topic, partition, encode_message_set(payloads)))

    def produce_acked(self, topic: str, partition: int, message_set: bytes, durability: int = 1):
        return rs.decode_produce_ack(self.request(rq.encode_produce_acked(durability, topic, partition, message_set)))

    def fetch(self, topic: str, partition: int, offset: int, max_size: int = 1 << 20):
        error, view = rs.split_error(self.request(rq.encode_fetch(topic, partition, offset, max_size)))
        return error, bytes(view)

    def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int = 10):
        return rs.decode_offsets(self.request(rq.encode_offsets(topic, partition, time_ms, max_offsets)))

    def multifetch(self, fetches):
        return [(error, bytes(view)) for error, view in
                rs.decode_multifetch(self.request(rq.encode_multifetch(fetches)))]
