"""The listening sockets, made by the supervisor before it forks so that a respawned
acceptor (or metrics exporter) keeps the port and its backlog: the broker's port, bound
here or passed by systemd (socket activation, ``ops/mpbroker.socket``), the modern Kafka
protocol's port (``kafka.port``) and the metrics port. A port that cannot be had stops the start with a ``StartupError``."""

import logging
import os
import socket

from mpbroker import systemd
from mpbroker.supervision.preflight import StartupError, start_step

log = logging.getLogger(__name__)

BACKLOG = 1024


def broker_listener(config) -> socket.socket:
    """The socket systemd passed, else one bound to ``hostname:port``."""
    if systemd.listen_fds():
        return _socket_from_systemd(config.port)
    return bind(config.hostname, config.port, "port")


def kafka_listener(config):
    """The modern protocol's socket on ``hostname:kafka.port``, or None (``kafka.port=-1``)."""
    if config.kafka_port < 0:
        return None
    return bind(config.hostname, config.kafka_port, "kafka.port")


def metrics_listener(config) -> socket.socket:
    return bind(config.metrics_host, config.metrics_port, "metrics.port")


def bind(host: str, port: int, key: str) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``key``: the setting that named the port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = None
    try:
        listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(BACKLOG)
    except OSError as exc:
        if listener is not None:
            listener.close()
        raise StartupError(f"cannot listen on {host or '*'}:{port} ({key}): {exc.strerror or exc}") from exc
    return listener


def _socket_from_systemd(configured_port: int) -> socket.socket:
    fd = systemd.LISTEN_FDS_START
    with start_step(f"the file descriptor systemd passed ({fd}) is not a usable socket"):
        os.set_inheritable(fd, False)
        listener = socket.socket(fileno=fd)
    if listener.type != socket.SOCK_STREAM or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        raise StartupError("the socket systemd passed is not a listening stream socket (check ListenStream=)")
    address = listener.getsockname()
    if address[1] != configured_port:
        log.warning("listening on port %d, passed by systemd; port=%d in the configuration is not used",
                    address[1], configured_port)
    log.info("using the listening socket passed by systemd (%s)", address[:2])
    return listener


class Listeners:
    """The supervisor's listening sockets, made once before it forks: the 0.7 port's
    (``broker``), the modern protocol's (``kafka``, None with ``kafka.port=-1``) and the
    metrics endpoint's (``metrics``, None unless enabled). A child keeps only the ones
    its role serves (``close_in_child``)."""

    def __init__(self, config, metrics: bool):
        self.broker = broker_listener(config)
        self.kafka = self.metrics = None
        try:
            self.kafka = kafka_listener(config)
            self.metrics = metrics_listener(config) if metrics else None
        except StartupError:
            self.close()
            raise
        self.port = self.broker.getsockname()[1]
        self.kafka_port = self.kafka.getsockname()[1] if self.kafka is not None else None

    def _all(self):
        return [listener for listener in (self.broker, self.kafka, self.metrics) if listener is not None]

    def close_in_child(self, role: str) -> None:
        keep = {"acceptor": (self.broker, self.kafka), "metrics": (self.metrics,)}.get(role, ())
        for listener in self._all():
            if not any(listener is kept for kept in keep):
                listener.close()

    def close(self) -> None:
        for listener in self._all():
            listener.close()
