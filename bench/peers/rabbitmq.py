"""RabbitMQ (Debian's ``rabbitmq-server``) as a private server for the benchmarks: its own
Erlang port mapper, node name, config, plugins file and Mnesia directory under a
temporary directory; every listener on 127.0.0.1; no plugins.

    with RabbitMQServer() as rabbit:
        pika.ConnectionParameters("127.0.0.1", rabbit.port) ...
        rabbit.version(), rabbit.data_bytes()
"""

import os

from bench.disk_usage import allocated_bytes
from bench.peers.debian import ensure_installed, package_version
from bench.peers.local_server import LocalServer, free_loopback_port

PACKAGE = "rabbitmq-server"
SERVER_SCRIPT = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitMQServer(LocalServer):
    name = "rabbitmq"

    def __init__(self, base_dir: str | None = None):
        ensure_installed(PACKAGE, services=("rabbitmq-server", "epmd"))
        super().__init__(base_dir)
        self.epmd_port = free_loopback_port()
        self.dist_port = free_loopback_port()
        self.data_dir = os.path.join(self.directory, "mnesia")
        self.node_name = f"bench{self.port}@localhost"

    def _write_files(self) -> None:
        with open(os.path.join(self.directory, "rabbitmq.conf"), "w") as f:
            f.write(f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                    "loopback_users = none\n"
                    "log.console = false\n"
                    "log.file.level = warning\n")
        with open(os.path.join(self.directory, "enabled_plugins"), "w") as f:
            f.write("[].\n")

    def command(self) -> tuple:
        self._write_files()
        join = lambda name: os.path.join(self.directory, name)  # noqa: E731
        env = {
            **os.environ,
            "HOME": self.directory,  # the Erlang cookie goes here
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": self.data_dir,
            "RABBITMQ_LOG_BASE": join("log"),
            "RABBITMQ_CONFIG_FILE": join("rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": join("advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": join("enabled_plugins"),
            "RABBITMQ_PID_FILE": join("rabbitmq.pid"),
            "RABBITMQ_CONF_ENV_FILE": join("rabbitmq-env.conf"),  # none: not /etc's
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        # The node's own port mapper, on loopback and a private port, stopped with it.
        self.spawn(["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"], env)
        return [SERVER_SCRIPT], env

    def version(self) -> str | None:
        return package_version(PACKAGE)

    def data_bytes(self) -> int:
        return allocated_bytes(self.data_dir)
