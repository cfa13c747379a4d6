"""Brokers and ZooKeeper on a private network of this machine, for faults between them.

Each server runs in a network namespace of its own (a node), all joined by a bridge;
the tests and their clients stay in the root namespace. ``network`` owns the kernel
objects and the faults (partitions, isolation, one-way drops, links down) and their
healing; ``cluster`` runs a ZooKeeper node and three broker nodes on it, and pauses,
kills and restarts them, and steps the brokers' dates (``clock``: each broker runs under
libfaketime with an offset of its own); ``availability`` decides what a test does on a machine that
cannot make namespaces (fail under CI, skip loudly elsewhere).

This is the node and network layer of "proving replication" (partitions, pauses,
crashes, power cuts, checked by a history checker); workloads and the checker are
built on it, not here.
"""

from .availability import start_network_or_skip
from .cluster import NetCluster
from .network import CLIENTS, Network, NetworkUnavailable, Node

__all__ = ["CLIENTS", "NetCluster", "Network", "NetworkUnavailable", "Node", "start_network_or_skip"]
