"""``mpbroker.testing.maven`` with the real ``mvn`` and Maven Central: a version Central does
not have is told apart from a network failure (Spark's Kafka connector falls back to an
older release on the first, gives up on the second). The jars copied are checked by every
fetch of the Apache Kafka harness and the connector on a machine without their caches."""

import shutil

import pytest

from mpbroker.testing import maven


@pytest.fixture(autouse=True)
def needs_mvn():
    if shutil.which("mvn") is None:
        pytest.skip("mvn is not on PATH")


def test_a_version_central_does_not_have_is_not_found(tmp_path):
    missing = ("org.slf4j", "slf4j-api", "0.0.0-no-such-version")
    run = maven.copy_dependencies(str(tmp_path), "maven-test", [missing], str(tmp_path / "jars"), timeout=300)
    if run.unreachable:
        pytest.skip(f"Maven Central does not answer: {run.output[-300:]}")
    assert run.returncode != 0
    assert run.not_found(*missing), run.output[-2000:]
    assert not run.unreachable
