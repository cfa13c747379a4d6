"""One consumer-group member for ``bench/zk_group_bench.py``: joins GROUP on TOPIC with
one stream, consumes and discards, and on SIGTERM shuts down (commit, release, leave).

    python -m bench.zk_group_member ZK GROUP TOPIC BACKOFF_MS SESSION_MS
"""

import signal
import sys
import threading

from mpbroker.clients.groups.connector import ConsumerConnector


def main(argv) -> int:
    zk_connect, group, topic, backoff_ms, session_ms = argv
    connector = ConsumerConnector(zk_connect=zk_connect, groupid=group, rebalance_backoff_ms=int(backoff_ms),
                                  zk_sessiontimeout_ms=int(session_ms), rebalance_retries_max=50)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    (stream,) = connector.create_message_streams({topic: 1})[topic]
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()
    stop.wait()
    connector.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
