"""Spark's own Kafka source (``org.apache.spark:spark-sql-kafka-0-10_2.13``) for the
installed pyspark, so that a test can read mpbroker's modern listener with it
(``tests/spark_loader/test_spark_kafka_connector.py``). Nothing of it is in the repository:
the connector and the jars it needs at run time are fetched from Maven Central with ``mvn``
into a cache under the user's home (``~/.cache/mpbroker-spark-kafka/<spark version>/jars``)
the first time, then reused.

    if not missing():
        jars = fetch_jars()        # paths, for spark.jars
        ... SparkSession.builder.config("spark.jars", ",".join(jars)) ...

Only what pyspark does not ship is kept (the connector, spark-token-provider-kafka-0-10,
kafka-clients, commons-pool2): a second scala-library, hadoop-client or spark-tags beside
pyspark's own would be two versions of one class on the class path.

The connector of the installed Spark version is fetched when Maven Central has it. When it
does not (pyspark 4.3.0's connector was not there when this was written: Central listed
spark-core 4.3.0 but spark-sql-kafka-0-10 only up to 4.2.0), the newest release of the same
major version that Central has is fetched instead, and ``connector_version()`` says which
(the 4.2.0 connector runs on Spark 4.3.0: the test passes with it). The cache keeps what
was fetched; delete ``~/.cache/mpbroker-spark-kafka/<spark version>`` to fetch again.
"""

import fcntl
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

from mpbroker.testing import maven

CACHE_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "mpbroker-spark-kafka")
GROUP = "org.apache.spark"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
CENTRAL = "https://repo.maven.apache.org/maven2"
# A jar's file name as mvn writes it: artifact, "-", a version that starts with digits and dots.
_JAR_NAME = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+(?:\.\d+)+[^/]*)\.jar$")


class SparkKafkaError(RuntimeError):
    """The connector could not be fetched (the message says why)."""


class MavenCentralUnreachable(SparkKafkaError):
    """``mvn`` could not reach Maven Central (and the jars are not in the cache)."""


class ConnectorNotPublished(SparkKafkaError):
    """Maven Central has no connector release for this Spark's major version."""


def spark_version() -> str | None:
    """The installed pyspark's version (None without pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None:
        return None
    from importlib.metadata import version

    return version("pyspark")


def coordinate(version: str) -> str:
    """``group:artifact:version`` of the connector, as ``--packages`` takes it."""
    return f"{GROUP}:{CONNECTOR}:{version}"


def missing() -> str:
    """Why the connector cannot be used here ('' if pyspark, Java and Maven or the cache are there)."""
    version = spark_version()
    if version is None:
        return "pyspark is not installed"
    if not shutil.which("java"):
        return "no java on PATH (Spark 4 needs Java 17 or newer)"
    if not cached(version) and not shutil.which("mvn"):
        return f"no mvn on PATH to fetch {coordinate(version)} (and it is not in the cache)"
    return ""


def _root(version: str) -> str:
    return os.path.join(CACHE_ROOT, version)


def jars_dir(version: str) -> str:
    return os.path.join(_root(version), "jars")


def cached(version: str) -> bool:
    return os.path.exists(os.path.join(_root(version), "complete.json"))


def fetch_record(version: str | None = None) -> dict:
    """What the fetch into the cache found: ``spark``, ``connector`` (the version fetched),
    ``jars`` (kept), ``left_out`` (pyspark ships them), ``seconds`` (how long it took)."""
    version = version or spark_version()
    with open(os.path.join(_root(version), "complete.json")) as f:
        return json.load(f)


def connector_version(version: str | None = None) -> str:
    """The connector's version in the cache for this Spark (its own, or the fallback)."""
    return fetch_record(version)["connector"]


def fetch_jars(version: str | None = None, timeout: float = 600.0) -> list:
    """The connector's jars for Spark ``version`` (default: the installed pyspark's), fetched
    with ``mvn`` into the cache the first time; their paths, for ``spark.jars``. Raises
    MavenCentralUnreachable when Maven could not download, ConnectorNotPublished when Central
    has no release to take, SparkKafkaError else."""
    version = version or spark_version()
    if version is None:
        raise SparkKafkaError("pyspark is not installed")
    if not cached(version):
        os.makedirs(_root(version), exist_ok=True)
        with open(os.path.join(_root(version), ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one fetch at a time; a second waiter finds it done
            if not cached(version):
                _fetch(version, timeout)
    return [os.path.join(jars_dir(version), name) for name in fetch_record(version)["jars"]]


def _fetch(version: str, timeout: float) -> None:
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="fetch-", dir=_root(version))
    try:
        connector = version
        staged = _copy_dependencies(connector, work, timeout)
        if staged is None:  # Central has no connector of this exact version
            connector = newest_published(version)
            staged = _copy_dependencies(connector, work, timeout)
            if staged is None:
                raise SparkKafkaError(f"Maven Central lists {coordinate(connector)} but mvn could not find it")
        shipped = {artifact_name(name) for name in os.listdir(pyspark_jars_dir())}
        kept, left_out = [], []
        for name in sorted(os.listdir(staged)):
            (left_out if artifact_name(name) in shipped else kept).append(name)
        for name in left_out:
            os.remove(os.path.join(staged, name))
        shutil.rmtree(jars_dir(version), ignore_errors=True)
        os.rename(staged, jars_dir(version))
        record = {"spark": version, "connector": connector, "jars": kept, "left_out": left_out,
                  "seconds": round(time.monotonic() - started, 1)}
        with open(os.path.join(work, "complete.json"), "w") as f:
            json.dump(record, f, indent=1)
        os.rename(os.path.join(work, "complete.json"), os.path.join(_root(version), "complete.json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _copy_dependencies(connector: str, work: str, timeout: float) -> str | None:
    """``mvn dependency:copy-dependencies`` of the connector (runtime scope) into a fresh
    directory under ``work``; None when Central has no such version."""
    project = tempfile.mkdtemp(prefix=f"{connector}-", dir=work)
    staged = os.path.join(project, "jars")
    try:
        # refresh: ask Central again about a version it did not have on an earlier try
        run = maven.copy_dependencies(project, "spark-kafka-jars", [(GROUP, CONNECTOR, connector)], staged, timeout,
                                      refresh=True)
    except maven.MavenMissing as e:
        raise SparkKafkaError(str(e)) from e
    except maven.MavenTimedOut as e:
        raise MavenCentralUnreachable(f"fetching {coordinate(connector)}: {e}") from e
    if run.returncode == 0 and os.path.exists(os.path.join(staged, f"{CONNECTOR}-{connector}.jar")):
        return staged
    if run.not_found(GROUP, CONNECTOR, connector):
        return None
    kind = MavenCentralUnreachable if run.unreachable else SparkKafkaError
    raise kind(f"mvn could not fetch {coordinate(connector)} (exit {run.returncode}):\n{run.output[-4000:]}")


def newest_published(version: str, timeout: float = 30.0) -> str:
    """The newest release (no preview) of the connector on Maven Central with ``version``'s
    major version and not newer than it, from Central's ``maven-metadata.xml``."""
    url = f"{CENTRAL}/{GROUP.replace('.', '/')}/{CONNECTOR}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            listed = [v.text or "" for v in ET.fromstring(answer.read()).iter("version")]
    except (urllib.error.URLError, OSError) as e:
        raise MavenCentralUnreachable(f"could not read {url}: {e}") from e
    wanted = _release(version)
    candidates = [v for v in listed if _release(v) and _release(v)[0] == wanted[0] and _release(v) <= wanted]
    if not candidates:
        raise ConnectorNotPublished(f"Maven Central has no {GROUP}:{CONNECTOR} release {wanted[0]}.x "
                                    f"up to {version} (it lists {', '.join(listed[-8:]) or 'none'})")
    return max(candidates, key=_release)


def _release(version: str) -> tuple:
    """(major, minor, patch) of a release such as 4.2.0; () for a preview or anything else."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(part) for part in match.groups()) if match else ()


def artifact_name(jar_name: str) -> str:
    """The artifact a jar file is of (``kafka-clients-3.9.2.jar``: ``kafka-clients``)."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name


def pyspark_jars_dir() -> str:
    """The jars pyspark ships (its JVM's class path)."""
    return os.path.join(importlib.util.find_spec("pyspark").submodule_search_locations[0], "jars")
