"""The acceptor's graceful stop when the stop and a new connection arrive in the same
round of events: the stop closes the listener, and the listener's event, already in
the round, must not take the process down (it used to: accept() on the closed socket
raised EBADF out of the loop). A real Acceptor on real shared memory and sockets."""

import selectors
import socket

from mpbroker.acceptor.acceptor import Acceptor
from mpbroker.config.broker_config import config_from_properties
from mpbroker.ipc.control import ControlChannel, Op
from mpbroker.ipc.shared_memory import SharedMemory


def test_a_stop_and_a_connection_in_the_same_round_of_events(tmp_path):
    config, _ = config_from_properties({"log.dir": str(tmp_path), "num.workers": "1"})
    memory = SharedMemory(1, 1 << 20)
    listener = socket.create_server(("127.0.0.1", 0))
    supervisor_end, acceptor_end = ControlChannel.pair()
    acceptor = Acceptor(config, listener, memory.request_rings, memory.answer_rings, memory.tables, memory.slots,
                        1, acceptor_end, 0, memory.counters.row(1))
    acceptor.selector = selectors.DefaultSelector()
    acceptor.start()
    acceptor.watch(acceptor_end.fileno(), acceptor._on_control)  # as the skeleton does
    client = socket.create_connection(listener.getsockname())
    try:
        supervisor_end.send(Op.STOP)
        events = acceptor.selector.select(5)
        handlers = [key.data for key, _ in events]
        assert acceptor._on_control in handlers
        assert any(getattr(handler, "func", None) == acceptor._on_listener for handler in handlers)
        # The stop first, then the listener's event of the same round.
        events.sort(key=lambda event: event[0].data != acceptor._on_control)
        acceptor.dispatch(events)
        assert acceptor.stopping and acceptor.connections == {}
        assert acceptor.finished()
    finally:
        client.close()
        acceptor.selector.close()
        listener.close()
