"""The control socket against a real broker: nothing a client sends, or fails to send or
read, stops or holds the supervisor. Malformed requests get an error answer and change
nothing; a client that trickles its request or never reads its answer does not delay
``mpbroker-ctl status`` or a worker's respawn, and is closed at its deadline; clients
beyond the cap are told so."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from mpbroker.codec.message import encode_message_set
from mpbroker.control_client import call
from mpbroker.control_server import (
    ANSWER_DEADLINE_S,
    MAX_CLIENTS,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_NESTING,
    REQUEST_DEADLINE_S,
    nesting_depth,
    parse_request,
)
from tests.polling import wait_for

from .wire import WireClient

TICK_S = 1.0  # the supervisor checks deadlines once a second


def connect(path: str, timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything until the broker closes (a reset after the data counts as the end)."""
    data = b""
    try:
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data


def raw_request(path: str, data: bytes) -> dict:
    with connect(path) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker stopped reading (too long) and answered
        answer = read_to_end(sock)
    assert answer.endswith(b"\n") and answer.count(b"\n") == 1, answer[:200]
    return json.loads(answer)


def process_ids(status: dict) -> list:
    return [status["pid"], status["acceptor"]["pid"]] + [worker["pid"] for worker in status["workers"]]


DEEP = MAX_REQUEST_NESTING + 1
MALFORMED = {  # request bytes -> part of the error
    "an array": (b"[]\n", "not an object"),
    "a string": (b'"status"\n', "not an object"),
    "a number": (b"7\n", "not an object"),
    "not JSON": (b"status please\n", "not JSON"),
    "an empty line": (b"\n", "not JSON"),
    "no command": (b'{"verb": "status"}\n', 'no "command" string'),
    "a command that is not a string": (b'{"command": ["status"]}\n', 'no "command" string'),
    "bad UTF-8": (b'{"command": "st\xffatus"}\n', "not UTF-8"),
    "too long": (b"[" * 100_000, f"longer than {MAX_REQUEST_BYTES} bytes"),
    "too deep": (b"[" * 20_000 + b"]" * 20_000 + b"\n", "nested deeper"),
    "deep inside an object": (b'{"command": "status", "x": ' + b"[" * DEEP + b"]" * DEEP + b"}\n", "nested deeper"),
    "an unknown command": (b'{"command": "launch"}\n', "unknown command 'launch'"),
}


def test_malformed_requests_get_an_error_answer_and_change_nothing(broker):
    before = broker.status()
    for what, (request, error) in MALFORMED.items():
        answer = raw_request(broker.socket_path, request)
        assert answer["ok"] is False and error in answer["error"], (what, answer)
    assert broker.process.poll() is None, broker.output()
    after = broker.status()
    assert process_ids(after) == process_ids(before)
    assert all(worker["restarts"] == 0 for worker in after["workers"]) and after["acceptor"]["restarts"] == 0
    with WireClient(broker.port) as client:  # and it still serves
        assert client.produce_acked("after", 0, encode_message_set([b"x"]), durability=0).error == 0


class SlowClient(threading.Thread):
    """Sends one byte of a request every ``interval`` and never a newline; notes when the
    broker closed the connection."""

    def __init__(self, path: str, interval: float = 0.5):
        super().__init__(daemon=True)
        self.sock = connect(path)
        self.connected_at = time.monotonic()
        self.interval = interval
        self.closed_at = None
        self.stop = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.01)
        while not self.stop.wait(self.interval):
            try:
                self.sock.send(b"{")
                self.sock.recv(4096)  # an answer or the end: either way, the broker closed it
                break
            except TimeoutError:
                continue
            except OSError:
                break
        self.closed_at = time.monotonic()


def test_slow_and_non_reading_clients_hold_neither_status_nor_respawn(broker_factory):
    partitions = 3000  # a status answer of about 500 KB: more than a unix socket buffers
    broker = broker_factory(num_partitions=partitions)
    with WireClient(broker.port) as client:
        for partition in range(partitions):
            client.produce("many", partition, [b"x"])
    broker.wait_until(lambda s: len(s["partitions"]) == partitions, what="every partition created")
    before = broker.status()
    answer_size = len(json.dumps(before))
    assert answer_size > 300_000

    slow = SlowClient(broker.socket_path)
    slow.start()
    stalled = connect(broker.socket_path)
    stalled.sendall(b'{"command": "status"}\n')  # and never reads the answer
    asked_at = time.monotonic()
    time.sleep(0.3)

    started = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-m", "mpbroker.cli.ctl", "-c", broker.config_path, "status"],
                                capture_output=True, text=True, timeout=8)
    except subprocess.TimeoutExpired:
        pytest.fail("mpbroker-ctl status did not answer within 8 s with a slow and a stalled client connected")
    assert result.returncode == 0, result.stderr
    assert "worker 0" in result.stdout
    assert time.monotonic() - started < 5

    victim = before["workers"][0]["pid"]
    assert slow.closed_at is None, "the slow client was closed before the kill: the test shows nothing"
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    status = broker.wait_until(lambda s: s["workers"][0]["pid"] not in (None, victim)
                               and s["workers"][0]["state"] == "up", timeout=10, what="worker 0 respawned")
    respawn_s = time.monotonic() - killed_at
    assert respawn_s < 4, f"worker 0 took {respawn_s:.1f}s to come back"
    assert process_ids(status)[:2] == process_ids(before)[:2]  # supervisor and acceptor untouched

    # The deadlines: the slow client is closed REQUEST_DEADLINE_S after it connected, the
    # stalled one ANSWER_DEADLINE_S after its answer was ready, with part of it unsent.
    slow.join(REQUEST_DEADLINE_S + 2 * TICK_S)
    assert slow.closed_at is not None, "the slow client is still connected past its deadline"
    assert REQUEST_DEADLINE_S - 0.5 <= slow.closed_at - slow.connected_at <= REQUEST_DEADLINE_S + 2 * TICK_S
    time.sleep(max(0.0, asked_at + ANSWER_DEADLINE_S + 2 * TICK_S - time.monotonic()))
    stalled.settimeout(2)
    received = read_to_end(stalled)
    stalled.close()
    assert 0 < len(received) < answer_size, "the stalled client was not cut off at its deadline"
    assert broker.process.poll() is None
    assert "control client did not read its answer within" in broker.output()


def test_clients_beyond_the_cap_are_told_so_and_served_once_others_leave(broker):
    idle = [connect(broker.socket_path) for _ in range(MAX_CLIENTS)]
    try:
        time.sleep(0.2)
        answer = call(broker.socket_path, "status", timeout=5)
        assert answer["ok"] is False and "too many control clients" in answer["error"]
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: call(broker.socket_path, "status", timeout=5)["ok"], 3, "a status once the others left")
    assert broker.process.poll() is None


def test_brackets_and_escapes_inside_strings_are_not_nesting():
    note = '[{"\\\\"}]' * 100 + '\\"[[['  # brackets, escaped backslashes and quotes, all inside one string
    request = json.dumps({"command": "status", "note": note, "nested": [[{"ok": [1]}]]}).encode()
    assert parse_request(request)["note"] == note
    assert nesting_depth('{"a": [[{"b": "]]]]"}]]}') == 4
