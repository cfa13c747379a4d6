"""The Apache Kafka reference harness itself (``mpbroker.testing.apache_kafka``): what it must
get right for the comparison tests and benches to start at all."""

import os

import pytest

from mpbroker.testing import apache_kafka
from tests.kafka.conftest import require_apache_kafka

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def jars():
    require_apache_kafka()


def test_cluster_id_starting_with_a_dash_formats(jars, tmp_path):
    """A random KRaft cluster id is URL-safe base64, so it starts with "-" once in 64; the
    storage tool then read it as an option and refused ("--cluster-id/-t: expected one
    argument"), which failed a whole CI run."""
    kafka = apache_kafka.ApacheKafka(tmp_path, cluster_id="-" + apache_kafka._cluster_id()[1:])
    kafka.format_storage()
    with open(os.path.join(kafka.log_dir, "meta.properties")) as f:
        assert f"cluster.id={kafka.cluster_id}\n" in f.read()
