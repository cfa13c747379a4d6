"""The control messages the supervisor only passes between its children, and what it
keeps of them for the children that start later.

From the workers and the acceptor to the registrar (ZooKeeper's side): ISR changes,
topics to create, topic deletions asked for and each worker's part of one done. From the
registrar to the others: the replica roles (each worker gets its own partitions'; the
acceptor the replicated topics: ``role_book``), a topic's changed settings (every live
worker), the cluster as Metadata tells it, and a topic deletion's steps (the
acceptor). The roles and the cluster are kept, so that a respawned worker or acceptor
gets them as soon as it is ready, without asking ZooKeeper.

Apart from the supervisor (``mpbroker.supervisor``) because none of it is the processes'
lifecycle: what the registrar's reports change in that (``ZK_STATE``, ``CHECKED``)
stays there.
"""

from mpbroker.ipc.control import Op
from mpbroker.supervision.role_book import RoleBook, chunks

TO_REGISTRAR = frozenset({Op.ISR_CHANGE, Op.CREATE_TOPIC, Op.DELETE_TOPICS, Op.LOCAL_DELETED})
_TO_ACCEPTOR = frozenset({Op.TOPICS_DELETED, Op.DELETE_LOCAL})  # a topic deletion's, from the registrar


def _fields(message: dict) -> dict:
    return {key: value for key, value in message.items() if key != "op"}


class Relay:
    """Between ``workers`` (``Child`` records, by slot), ``acceptor`` and ``registrar``
    (None without ZooKeeper)."""

    def __init__(self, workers: list, acceptor, registrar):
        self.workers = workers
        self.acceptor = acceptor
        self.registrar = registrar
        self.roles = RoleBook(len(workers))  # replica roles, handed to the workers and the acceptor
        self.cluster = None  # the registrar's last view of the cluster, for the acceptor's Metadata

    def to_registrar(self, op: str, message: dict) -> None:
        """A worker's or the acceptor's message for ZooKeeper (``TO_REGISTRAR``); dropped
        while no registrar runs (its sender asks again or ZooKeeper's state tells)."""
        if self.registrar is not None and self.registrar.alive:
            self.registrar.channel.send(op, **_fields(message))

    def from_registrar(self, op: str, message: dict) -> bool:
        """Pass on a registrar's message for the others; False if it is not one."""
        if op == Op.ROLES:
            topics_changed, by_slot = self.roles.apply(message)
            for worker in self.workers:  # every worker: each must know the message's number
                if worker.ready:
                    self.send_roles(worker, by_slot.get(worker.slot, []), "seq" in message)
            if topics_changed and self.acceptor.ready:
                self.acceptor.channel.send(Op.ROLES, topics=self.roles.topics)
        elif op == Op.TOPIC_CONFIG:  # a topic's settings file changed: its logs' owners apply it
            for worker in self.workers:
                if worker.alive:  # one starting reads it when it opens its logs, or here once it listens
                    worker.channel.send(Op.TOPIC_CONFIG, topic=message["topic"])
        elif op == Op.CLUSTER:
            self.cluster = _fields(message)
            if self.acceptor.ready:
                self.acceptor.channel.send(Op.CLUSTER, **self.cluster)
        elif op in _TO_ACCEPTOR:
            if self.acceptor.ready:
                self.acceptor.channel.send(op, **_fields(message))
        else:
            return False
        return True

    def acceptor_ready(self) -> None:
        """A new acceptor is ready: what it must know before it serves replicated topics."""
        if self.roles.known:
            self.acceptor.channel.send(Op.ROLES, topics=self.roles.topics)
        if self.cluster is not None:
            self.acceptor.channel.send(Op.CLUSTER, **self.cluster)

    def worker_ready(self, worker) -> None:
        """A worker is ready (started or respawned): its partitions' roles, whole."""
        self.send_roles(worker, self.roles.for_worker(worker.slot), True)

    def send_roles(self, worker, entries: list, complete: bool) -> None:
        """Hand a worker its replica roles; the last part carries the number of the
        registrar's last complete message (the worker's leaders act only once applied)."""
        parts = chunks(entries) or [[]]
        for index, part in enumerate(parts):
            fields = {"partitions": part}
            if complete and index == len(parts) - 1:
                fields["seq"] = self.roles.seq
            worker.channel.send(Op.ROLES, **fields)
