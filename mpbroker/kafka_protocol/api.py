"""The APIs the modern listener speaks, with the versions it advertises and serves.

The tier is coherent on purpose: every client we test with (librdkafka and kcat,
kafka-python, aiokafka, kafkajs, the Java clients) finds what it insists on. All of it
is non-flexible except ApiVersions 3, DescribeAcls 2 and InitProducerId 2-4 (request
header v2 and response header v1, tagged fields in the bodies: ``flexible_from``).
Two ranges per API: what ApiVersions *advertises* and what is *served*. They differ
only for Produce: old librdkafka (kcat 1.7) turns gzip and snappy on only when
Produce 0 lies in the advertised range, so 0-2 are advertised (as Kafka 4 advertises
them) and answered with UNSUPPORTED_VERSION (message formats 0 and 1 are not taken;
Kafka 4.4 closes the connection instead). An API of the tier not built yet is not
advertised at all.

DescribeAcls 2 is what makes this a Kafka 2.5 to a client that infers a broker's
release from its ApiVersions: kafka-python 3 does, and only from 2.5 on does it answer
OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH and UNKNOWN_PRODUCER_ID by asking
InitProducerId (v3+, with its producer id and epoch: KIP-360) again; below 2.5 it
resets its producer id and never asks for another, and its sender sends nothing again.
(It does that too after a batch it had retried expires, whatever the broker:
``tests/kafka/test_kafka_python_recovery.py``.) Its inference tries DescribeClientQuotas
0 (2.6), Fetch 12 (2.7), Produce 9 (2.8) and DescribeAcls 3 (3.3) before DescribeAcls 2:
advertising any of those would make it take this for a later release, hence
DescribeAcls stops at 2.
"""

from enum import IntEnum
from typing import NamedTuple


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    DESCRIBE_CONFIGS = 32
    DELETE_GROUPS = 42


class Versions(NamedTuple):
    advertised_min: int
    advertised_max: int
    served_min: int
    flexible_from: int  # first version with tagged fields (header v2); past advertised_max: none served

    def served(self, version: int) -> bool:
        return self.served_min <= version <= self.advertised_max

    def advertised(self, version: int) -> bool:
        return self.advertised_min <= version <= self.advertised_max


SUPPORTED = {
    ApiKey.PRODUCE: Versions(0, 8, 3, 9),
    ApiKey.FETCH: Versions(4, 11, 4, 12),
    ApiKey.LIST_OFFSETS: Versions(1, 5, 1, 6),
    ApiKey.METADATA: Versions(0, 8, 0, 9),
    ApiKey.API_VERSIONS: Versions(0, 3, 0, 3),
    ApiKey.CREATE_TOPICS: Versions(2, 4, 2, 5),
    ApiKey.DELETE_TOPICS: Versions(1, 3, 1, 4),
    ApiKey.DESCRIBE_CONFIGS: Versions(1, 2, 1, 4),
    ApiKey.INIT_PRODUCER_ID: Versions(0, 4, 0, 2),
    ApiKey.DESCRIBE_ACLS: Versions(1, 2, 1, 2),
    ApiKey.OFFSET_COMMIT: Versions(2, 7, 2, 8),
    ApiKey.OFFSET_FETCH: Versions(1, 5, 1, 6),
    ApiKey.FIND_COORDINATOR: Versions(0, 2, 0, 3),
    ApiKey.JOIN_GROUP: Versions(0, 5, 0, 6),
    ApiKey.HEARTBEAT: Versions(0, 3, 0, 4),
    ApiKey.LEAVE_GROUP: Versions(0, 3, 0, 4),
    ApiKey.SYNC_GROUP: Versions(0, 3, 0, 4),
    ApiKey.DESCRIBE_GROUPS: Versions(0, 4, 0, 5),
    ApiKey.LIST_GROUPS: Versions(0, 2, 0, 3),
    ApiKey.DELETE_GROUPS: Versions(0, 1, 0, 2),
}


def flexible(api_key: int, version: int) -> bool:
    """Whether this request and its response use tagged fields (header v2 / v1)."""
    versions = SUPPORTED.get(api_key)
    return versions is not None and version >= versions.flexible_from


def response_header_flexible(api_key: int, version: int) -> bool:
    """ApiVersions answers with response header v0 whatever its version (KIP-511):
    a client that sent a version the broker does not know must still read it."""
    return api_key != ApiKey.API_VERSIONS and flexible(api_key, version)
