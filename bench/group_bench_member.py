"""One confluent-kafka consumer of ``bench/group_bench.py``, a process of its own, driven
through stdin and reporting on stdout, one JSON object a line.

    python -m bench.group_bench_member '{"bootstrap": ..., "group": ..., "topic": ..., "config": {...}}'

It creates its ``Consumer`` (the given extra ``config`` over librdkafka's defaults),
fetches the topic's metadata (connected before any clock starts) and says ``ready``.
Then it polls in a loop (``poll(POLL_S)``: librdkafka's rebalance callbacks run inside
``poll``) and between polls takes commands, one a line:

- ``subscribe``: says ``subscribe`` with the time just before ``subscribe()``;
- ``close``: says ``close`` with the time just before ``close()`` and ``closed`` after, then exits;
- ``commit_sync START SECONDS``: from ``START`` (``time.monotonic()``, the same clock in
  every process of the machine) for ``SECONDS``, ``commit(offsets=[...], asynchronous=False)``
  of partition 0 in a loop, each with the next offset; says ``commits`` with the count,
  the window and every commit's latency (microseconds);
- ``commit_async START SECONDS WINDOW``: the same with ``asynchronous=True``, at most
  ``WINDOW`` commits unanswered (``on_commit`` callbacks, served by ``poll``), then waits
  for every answer; says ``commits`` with the count of answered commits and the window
  from the first commit to the last answer;
- ``committed``: says ``committed`` with the group's committed offset of partition 0.

Every rebalance callback says ``assign``, ``revoke`` or ``lost`` with its time and the
partitions. A failed commit ends the process with an ``error`` line.
"""

import json
import queue
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

POLL_S = 0.01  # the poll loop's timeout: a command waits at most this long
QUIET = {"log_level": 3}


def say(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


def read_commands(commands: queue.Queue) -> None:
    for line in sys.stdin:
        commands.put(line.split())
    commands.put(["close"])  # the driver is gone


class Member:
    def __init__(self, settings: dict):
        self.topic = settings["topic"]
        self.commits_answered = 0
        self.commit_errors = []
        self.consumer = Consumer({"bootstrap.servers": settings["bootstrap"], "group.id": settings["group"],
                                  "enable.auto.commit": False, "on_commit": self.on_commit, **QUIET,
                                  **settings.get("config", {})})
        self.consumer.list_topics(self.topic, timeout=30)
        self.next_offset = 1

    # --- rebalance callbacks (inside poll) ----------------------------------------------------

    def on_assign(self, _consumer, partitions) -> None:
        say("assign", partitions=sorted(p.partition for p in partitions))

    def on_revoke(self, _consumer, partitions) -> None:
        say("revoke", partitions=sorted(p.partition for p in partitions))

    def on_lost(self, _consumer, partitions) -> None:
        say("lost", partitions=sorted(p.partition for p in partitions))

    def on_commit(self, error, partitions) -> None:
        failed = [str(p.error) for p in partitions if p.error is not None]
        if error is not None or failed:
            self.commit_errors.append(str(error) if error is not None else failed[0])
        else:
            self.commits_answered += 1

    # --- commands ------------------------------------------------------------------------

    def subscribe(self) -> None:
        say("subscribe")
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)

    def offsets(self) -> list:
        self.next_offset += 1
        return [TopicPartition(self.topic, 0, self.next_offset)]

    def commit_sync(self, start: float, seconds: float) -> None:
        wait_until(start)
        commit, offsets, clock = self.consumer.commit, self.offsets, time.perf_counter
        latencies = []
        began = time.monotonic()
        end = began + seconds
        while time.monotonic() < end:
            before = clock()
            try:
                answered = commit(offsets=offsets(), asynchronous=False)
            except KafkaException as exc:
                say("error", what=f"commit: {exc}")
                sys.exit(1)
            if answered[0].error is not None:
                say("error", what=f"commit: {answered[0].error}")
                sys.exit(1)
            latencies.append(int((clock() - before) * 1e6))
        say("commits", count=len(latencies), start=began, end=time.monotonic(), latencies_us=latencies,
            last_offset=self.next_offset)

    def commit_async(self, start: float, seconds: float, window: int) -> None:
        wait_until(start)
        commit, offsets, poll = self.consumer.commit, self.offsets, self.consumer.poll
        self.commits_answered, self.commit_errors = 0, []
        sent = 0
        began = time.monotonic()
        end = began + seconds
        while time.monotonic() < end:
            if sent - self.commits_answered - len(self.commit_errors) >= window:
                poll(0.001)
                continue
            commit(offsets=offsets(), asynchronous=True)
            sent += 1
            if sent % 64 == 0:
                poll(0)
        deadline = time.monotonic() + 60
        while self.commits_answered + len(self.commit_errors) < sent and time.monotonic() < deadline:
            poll(0.001)
        finished = time.monotonic()
        if self.commit_errors or self.commits_answered < sent:
            say("error", what=f"async commits: {self.commits_answered} of {sent} answered, "
                              f"{len(self.commit_errors)} failed: {self.commit_errors[:3]}")
            sys.exit(1)
        say("commits", count=self.commits_answered, start=began, end=finished, last_offset=self.next_offset)

    def committed(self) -> None:
        (partition,) = self.consumer.committed([TopicPartition(self.topic, 0)], timeout=30)
        say("committed", offset=partition.offset)

    def close(self) -> None:
        say("close")
        self.consumer.close()
        say("closed")


def wait_until(start: float) -> None:
    delay = start - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def main(argv) -> int:
    member = Member(json.loads(argv[0]))
    commands = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
    say("ready")
    subscribed = False
    while True:
        try:
            command = commands.get_nowait()
        except queue.Empty:
            if subscribed:
                member.consumer.poll(POLL_S)
            else:
                time.sleep(POLL_S)
            continue
        name, arguments = command[0], command[1:]
        if name == "subscribe":
            member.subscribe()
            subscribed = True
        elif name == "commit_sync":
            member.commit_sync(float(arguments[0]), float(arguments[1]))
        elif name == "commit_async":
            member.commit_async(float(arguments[0]), float(arguments[1]), int(arguments[2]))
        elif name == "committed":
            member.committed()
        elif name == "close":
            member.close()
            return 0
        else:
            say("error", what=f"unknown command {command}")
            return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
