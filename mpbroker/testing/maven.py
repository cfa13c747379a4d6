"""Jars from Maven Central through the machine's ``mvn``: a throwaway project whose pom
lists the wanted artifacts, and ``dependency:copy-dependencies`` of its runtime scope
into a directory. The Apache Kafka harness and Spark's Kafka connector fetch this way.

Why ``mvn`` and not plain downloads: it resolves the transitive dependencies (Kafka's
broker is some 80 jars, the connector a handful beside what pyspark ships) and honours
the machine's Maven settings (mirrors, proxies, its local repository as a cache).
"""

import os
import subprocess
from typing import NamedTuple

# What mvn prints when Maven Central is out of reach; with an empty ~/.m2 it cannot even
# get its dependency plugin ("No plugin found for prefix").
NETWORK_FAILURES = ("Could not transfer", "UnknownHost", "Unknown host", "Connection refused", "Connect timed out",
                    "Network is unreachable", "No route to host", "connect timed out", "Remote host terminated",
                    "No plugin found for prefix")


class MavenMissing(RuntimeError):
    """``mvn`` is not on PATH."""


class MavenTimedOut(RuntimeError):
    """``mvn`` did not finish in time."""


class Copied(NamedTuple):
    returncode: int
    output: str  # stdout and stderr

    @property
    def unreachable(self) -> bool:
        """Whether the failure was Maven Central being out of reach."""
        return self.returncode != 0 and any(s in self.output for s in NETWORK_FAILURES)

    def not_found(self, group: str, artifact: str, version: str) -> bool:
        """Whether Central has no such artifact version."""
        jar = f"{group}:{artifact}:jar:{version}"
        return f"Could not find artifact {jar}" in self.output or f"{jar} was not found" in self.output


def pom(name: str, dependencies) -> str:
    """A pom of packaging ``pom`` named ``name`` that depends on ``(group, artifact, version)``s."""
    listed = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                     "</dependency>\n" for g, a, v in dependencies)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0">\n<modelVersion>4.0.0</modelVersion>\n'
            f"<groupId>mpbroker.testing</groupId><artifactId>{name}</artifactId><version>1</version>\n"
            f"<packaging>pom</packaging>\n<dependencies>\n{listed}</dependencies>\n</project>\n")


def copy_dependencies(project: str, name: str, dependencies, output_dir: str, timeout: float, *,
                      refresh: bool = False) -> Copied:
    """Write the pom into the directory ``project`` and copy the dependencies' runtime jars
    into ``output_dir``; ``refresh`` (-U) asks Central again about versions it did not have
    on an earlier try. Raises MavenMissing or MavenTimedOut."""
    with open(os.path.join(project, "pom.xml"), "w") as f:
        f.write(pom(name, dependencies))
    command = ["mvn", "-B", "-q", *(["-U"] if refresh else []), "dependency:copy-dependencies",
               f"-DoutputDirectory={output_dir}", "-DincludeScope=runtime"]
    try:
        run = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise MavenMissing("mvn is not on PATH") from e
    except subprocess.TimeoutExpired as e:
        raise MavenTimedOut(f"mvn did not finish in {timeout}s") from e
    return Copied(run.returncode, run.stdout + run.stderr)
