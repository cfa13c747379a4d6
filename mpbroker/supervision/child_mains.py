"""What each forked child runs: its process object, built from what the supervisor
made before forking (the configuration, the shared-memory rings and tables, the
listening sockets, the child's end of its control channel), then its loop. The
return value is the child's exit code.

The registrar's kazoo and the exporter's prometheus_client are imported in the child
only: the supervisor stays a single-threaded process that can fork.
"""

from mpbroker.acceptor.acceptor import Acceptor
from mpbroker.workers.worker import PartitionWorker


def run_worker(supervisor, child) -> int:
    memory, slot = supervisor.memory, child.slot
    recover = not supervisor.clean or child.restarts > 0
    worker = PartitionWorker(slot, supervisor.config, memory.request_rings[slot], memory.answer_rings[slot],
                             memory.tables[slot], memory.slots, child.child_channel, memory.counters.row(slot),
                             recover=recover,
                             lease_slot=supervisor.registrar.slot if supervisor.registrar is not None else None)
    return worker.run()


def run_acceptor(supervisor, child) -> int:
    memory = supervisor.memory
    acceptor = Acceptor(supervisor.config, supervisor.listeners.broker, memory.request_rings, memory.answer_rings,
                        memory.tables, memory.slots, child.slot, child.child_channel, child.restarts,
                        memory.counters.row(child.slot), kafka_listener=supervisor.listeners.kafka,
                        group_snapshot=memory.group_snapshot)
    return acceptor.run()


def run_registrar(supervisor, child) -> int:
    from mpbroker.registrar.registrar import Registrar

    memory = supervisor.memory
    registrar = Registrar(supervisor.config, supervisor.port, memory.tables, memory.slots, child.slot,
                          child.child_channel, supervisor.creator_id, memory.counters.row(child.slot),
                          kafka_port=supervisor.kafka_port)
    return registrar.run()


def run_metrics(supervisor, child) -> int:
    from mpbroker.metrics.collector import BrokerCollector
    from mpbroker.metrics.exporter import MetricsExporter

    memory = supervisor.memory
    processes = [(other.slot, other.name, other.role) for other in supervisor.children]
    collector = BrokerCollector(supervisor.config, memory.tables, memory.slots, memory.counters, processes,
                                group_snapshot=memory.group_snapshot)
    exporter = MetricsExporter(collector, supervisor.listeners.metrics, memory.slots, child.slot, child.child_channel)
    return exporter.run()


MAINS = {"worker": run_worker, "acceptor": run_acceptor, "registrar": run_registrar, "metrics": run_metrics}
