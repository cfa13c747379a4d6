"""A consumer-group member run as its own process, for tests that SIGKILL one:

    python -m tests.clients.groups.group_member ZK GROUP TOPIC OUTPUT [SESSION_MS] [STREAMS]

Every message it takes is appended to OUTPUT as one line (``<broker>-<partition>
<next offset> <payload>``) and flushed before the next is asked for: what it wrote
is what it processed. Auto-commit runs every 200 ms.
"""

import sys

from mpbroker.clients.groups.connector import ConsumerConnector


def main(argv) -> int:
    zk_connect, group, topic, output = argv[:4]
    session_ms = int(argv[4]) if len(argv) > 4 else 6000
    streams = int(argv[5]) if len(argv) > 5 else 1
    connector = ConsumerConnector(zk_connect=zk_connect, groupid=group, zk_sessiontimeout_ms=session_ms,
                                  autocommit_interval_ms=200, rebalance_backoff_ms=300, rebalance_retries_max=20)
    (stream,) = connector.create_message_streams({topic: streams})[topic][:1]
    with open(output, "a", buffering=1) as out:
        print("started", connector.consumer_id, flush=True)
        for message in stream:
            out.write(f"{message.broker_id}-{message.partition} {message.next_offset} {message.payload.decode()}\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
