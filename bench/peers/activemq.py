"""ActiveMQ (Debian's ``activemq``) as a private server for the benchmarks: persistent,
with the KahaDB store under a temporary directory, and one STOMP connector on
127.0.0.1 (no OpenWire, no JMX, no web console). Two settings differ from ActiveMQ's
defaults, for the reasons given where they are set: queues page in 1000 messages at a
time (``MAX_PAGE_SIZE``), and cached messages get 256 MB of the 2 GB heap (``MEMORY_LIMIT``).

    with ActiveMQServer() as activemq:
        stomp.Connection12([("127.0.0.1", activemq.port)]) ...
        activemq.version(), activemq.data_bytes()
"""

import os

from bench.disk_usage import allocated_bytes
from bench.peers.debian import ensure_installed, package_version
from bench.peers.local_server import LocalServer

PACKAGE = "activemq"
HOME = "/usr/share/activemq"
HEAP = "2G"
# Memory for messages held in queues' caches. ActiveMQ counts a cached message at far
# less than it takes on the heap: at the default (70% of the heap) a 1 GB heap filled up
# with about a million 200-byte messages queued (full collections back to back, then
# "STORE COMMIT FAILED"), so the limit is set well below the heap.
MEMORY_LIMIT = "256 mb"
# Messages a queue holds paged in from the store, unacknowledged deliveries included:
# at the default (200) a consumer with a prefetch of 1000 that acknowledges every 500
# messages stalls at 200, so the queues page in as many as the prefetch.
MAX_PAGE_SIZE = 1000

CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="bench" useJmx="false"
          persistent="true" dataDirectory="{data}">
    <destinationPolicy>
      <policyMap>
        <policyEntries>
          <policyEntry queue=">" maxPageSize="{page}"/>
        </policyEntries>
      </policyMap>
    </destinationPolicy>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="{memory}"/></memoryUsage>
      </systemUsage>
    </systemUsage>
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""

# ActiveMQ logs through log4j 1.2: warnings and errors go to the server's output file.
LOG4J = """log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d %-5p [%c] %m%n
"""

# What Debian's /usr/bin/activemq passes to a Java newer than 8.
JAVA_MODULE_OPTIONS = [
    "--add-reads=java.xml=java.logging",
    "--add-opens", "java.base/java.security=ALL-UNNAMED",
    "--add-opens", "java.base/java.net=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
]


class ActiveMQServer(LocalServer):
    name = "activemq"

    def __init__(self, base_dir: str | None = None):
        ensure_installed(PACKAGE, services=("activemq",))
        super().__init__(base_dir)
        self.conf_dir = os.path.join(self.directory, "conf")
        self.data_dir = os.path.join(self.directory, "data")

    def command(self) -> tuple:
        os.makedirs(self.conf_dir, exist_ok=True)
        os.makedirs(self.data_dir, exist_ok=True)
        config_path = os.path.join(self.conf_dir, "activemq.xml")
        with open(config_path, "w") as f:
            f.write(CONFIG.replace("{data}", self.data_dir).replace("{port}", str(self.port))
                    .replace("{page}", str(MAX_PAGE_SIZE)).replace("{memory}", MEMORY_LIMIT))
        log_config_path = os.path.join(self.conf_dir, "log4j.properties")
        with open(log_config_path, "w") as f:
            f.write(LOG4J)
        argv = ["java", f"-Xms{HEAP}", f"-Xmx{HEAP}", *JAVA_MODULE_OPTIONS,
                f"-Dlog4j.configuration=file:{log_config_path}",
                f"-Dactivemq.classpath={self.conf_dir}", f"-Dactivemq.home={HOME}",
                f"-Dactivemq.base={self.directory}", f"-Dactivemq.conf={self.conf_dir}",
                f"-Dactivemq.data={self.data_dir}",
                "-jar", os.path.join(HOME, "bin", "activemq.jar"), "start", f"xbean:file:{config_path}"]
        return argv, None

    def version(self) -> str | None:
        return package_version(PACKAGE)

    def data_bytes(self) -> int:
        return allocated_bytes(self.data_dir)
