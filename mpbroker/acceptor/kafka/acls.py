"""DescribeAcls: answered as a Kafka broker without an authorizer answers it.

No ACLs are kept or enforced here (every client may do everything it can ask), so
every DescribeAcls gets SECURITY_DISABLED (54) with a message and no resources, the
answer of a Kafka broker with no ``authorizer.class.name``. It is served at all (v1-2)
for what advertising it tells clients: kafka-python infers Kafka 2.5 from DescribeAcls 2
and only then recovers from a producer-state error through InitProducerId (see
``kafka_protocol.api``).
"""

from kafka.protocol.admin import DescribeAclsResponse

from mpbroker.acceptor.kafka.answers import respond
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

NO_AUTHORIZER = "No authorizer is configured on this broker: it keeps no ACLs"


def describe_acls(connection, request_header, request) -> None:
    version = request_header.api_version
    respond(connection, request_header.correlation_id, ApiKey.DESCRIBE_ACLS, version,
            DescribeAclsResponse[version](throttle_time_ms=0, error_code=KafkaError.SECURITY_DISABLED,
                                          error_message=NO_AUTHORIZER, resources=[]))
