"""ActiveMQ in the paper benchmark, driven by stomp.py (STOMP 1.2): a queue per run,
persistent messages (``persistent:true``, stored in KahaDB).

Producer modes: SEND without receipts (fire-and-forget; the last SEND asks for a receipt,
and the broker handles a connection's frames in order, so the clock stops when it has
taken every message), a receipt for every SEND, and transactions of 50 (BEGIN, 50 SENDs,
COMMIT with a receipt). Consumer: ``ack:client`` (cumulative) with
``activemq.prefetchSize:1000``, an ACK every 500 messages.

stomp.py leaves Nagle's algorithm on; with it a receipt after a run of small frames
waits for the delayed-ACK timer (~40 ms), so the socket gets TCP_NODELAY, as pika and
mpbroker's clients set it.
"""

import importlib.metadata
import socket
import threading

import stomp

from bench.paper.messages import make_payload
from bench.peers.activemq import ActiveMQServer

PREFETCH = 1000
ACK_EVERY = PREFETCH // 2
RECEIPT_TIMEOUT = 120.0
STALL_TIMEOUT = 60.0
PERSISTENT = {"persistent": "true"}

# mode -> (label, messages per acknowledged unit; 0: none, and how)
MODES = {
    "ack-1": ("receipt for every SEND", 1),
    "ack-50": ("transactions of 50, receipt on COMMIT", 50),
    "ff": ("SEND without receipts", 0),
}


class _Listener(stomp.ConnectionListener):
    """Receipts and messages from stomp.py's receiver thread."""

    def __init__(self):
        self.receipts = threading.Condition()
        self.last_receipt = None
        self.error = None
        self.on_each_message = None

    def on_receipt(self, frame) -> None:
        with self.receipts:
            self.last_receipt = frame.headers.get("receipt-id")
            self.receipts.notify_all()

    def on_error(self, frame) -> None:
        with self.receipts:
            self.error = f"{frame.headers.get('message')}: {frame.body[:200]!r}"
            self.receipts.notify_all()

    def on_message(self, frame) -> None:
        if self.on_each_message is not None:
            self.on_each_message(frame)

    def wait_receipt(self, receipt: str) -> None:
        with self.receipts:
            if not self.receipts.wait_for(lambda: self.last_receipt == receipt or self.error,
                                          timeout=RECEIPT_TIMEOUT):
                raise TimeoutError(f"activemq: no receipt {receipt} in {RECEIPT_TIMEOUT:.0f}s")
            if self.error:
                raise RuntimeError(f"activemq: {self.error}")


def _send_unacknowledged(connection, listener, destination: str, count: int, _unit, timeline) -> int:
    """SENDs without receipts; the last one asks for a receipt (frames are handled in order)."""
    payload, send = make_payload(), connection.send
    for sent in range(1, count):
        send(destination, payload, headers=PERSISTENT)
        if sent >= timeline.next_mark:
            timeline.mark(sent)
    send(destination, payload, headers=PERSISTENT, receipt="end")
    listener.wait_receipt("end")
    return count


def _send_with_receipts(connection, listener, destination: str, count: int, _unit, timeline) -> int:
    """Each SEND waits for its receipt (the broker stored the message)."""
    payload, send = make_payload(), connection.send
    for sent in range(1, count + 1):
        receipt = str(sent)
        send(destination, payload, headers=PERSISTENT, receipt=receipt)
        listener.wait_receipt(receipt)
        if sent >= timeline.next_mark:
            timeline.mark(sent)
    return count


def _send_in_transactions(connection, listener, destination: str, count: int, unit: int, timeline) -> int:
    """BEGIN, ``unit`` SENDs, COMMIT with a receipt, waited for before the next one."""
    payload, send = make_payload(), connection.send
    sent = 0
    for number in range(count // unit):
        transaction = connection.begin()
        for _ in range(unit):
            send(destination, payload, headers=PERSISTENT, transaction=transaction)
        receipt = f"commit-{number}"
        connection.commit(transaction, receipt=receipt)
        listener.wait_receipt(receipt)
        sent += unit
        if sent >= timeline.next_mark:
            timeline.mark(sent)
    return sent


class ActiveMQSystem:
    name = "activemq"
    modes = MODES
    per_message_ack_modes = ("ack-1",)
    consumed_mode = "ff"

    def __init__(self, base_dir: str | None = None):
        self.base_dir = base_dir
        self.server = ActiveMQServer(base_dir)
        self.settings = {"store": "KahaDB", "protocol": "STOMP 1.2", "prefetch": PREFETCH}

    def __enter__(self) -> "ActiveMQSystem":
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)

    def versions(self) -> dict:
        return {"activemq": self.server.version(), "stomp.py": importlib.metadata.version("stomp.py")}

    def disk_bytes(self) -> int:
        return self.server.data_bytes()

    @staticmethod
    def destination(mode: str) -> str:
        return f"/queue/paper-{mode}"

    def _connect(self) -> tuple:
        connection = stomp.Connection12([("127.0.0.1", self.server.port)], heartbeats=(0, 0),
                                        auto_content_length=True)
        listener = _Listener()
        connection.set_listener("bench", listener)
        connection.connect(wait=True)
        connection.transport.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, listener

    def produce(self, mode: str, count: int, timeline) -> dict:
        label, unit = MODES[mode]
        send_all = {0: _send_unacknowledged, 1: _send_with_receipts}.get(unit, _send_in_transactions)
        connection, listener = self._connect()
        try:
            timeline.start()
            sent = send_all(connection, listener, self.destination(mode), count, unit, timeline)
            return timeline.finish(sent, label=label)
        finally:
            connection.disconnect()

    def discard(self, mode: str) -> None:
        """A fresh broker for the next run. STOMP cannot delete a queue, and a queue that
        nobody reads keeps its share of the memory limit: with two of them ActiveMQ's
        producer flow control held the next producer for good."""
        self.server.__exit__(None, None, None)
        self.server = ActiveMQServer(self.base_dir)
        self.server.__enter__()

    def consume(self, mode: str, count: int, timeline) -> dict:
        connection, listener = self._connect()
        done = threading.Event()
        received = 0

        def on_message(frame):
            nonlocal received
            received += 1
            if received % ACK_EVERY == 0 or received == count:
                connection.ack(frame.headers["ack"])  # ack:client acknowledges everything up to it
            if received >= timeline.next_mark:
                timeline.mark(received)
            if received == count:
                done.set()

        listener.on_each_message = on_message
        try:
            timeline.start()
            connection.subscribe(self.destination(mode), id="bench", ack="client",
                                 headers={"activemq.prefetchSize": str(PREFETCH)})
            seen = -1
            while not done.wait(STALL_TIMEOUT):
                if listener.error or received == seen:
                    raise RuntimeError(f"activemq consumer stalled at {received} of {count} messages: "
                                       f"{listener.error or 'nothing for %.0fs' % STALL_TIMEOUT}")
                seen = received
            result = timeline.finish(received, label=f"ack:client, prefetch {PREFETCH}, ACK every {ACK_EVERY}")
            connection.unsubscribe("bench")
            return result
        finally:
            connection.disconnect()
