"""InitProducerId: a producer id and epoch for an idempotent producer.

Each InitProducerId without a ``transactional.id`` gets a brand-new id, epoch 0 (as
Kafka's coordinator answers it), also from v3 on (KIP-360), where the request names the
producer id and epoch it had: Kafka's ``handleInitProducerId`` bumps that epoch only
for a ``transactional.id`` (whose coordinator keeps its id and epoch) and hands a
non-transactional producer a new id whatever it names. A new id is as good a fence as
a bumped epoch here: the partitions keep no state of it, so its batches are taken from
sequence 0 on, and the old id's late retries are judged against the old id's state,
apart. A bump would need the id's latest epoch kept across partitions and restarts,
which nothing here keeps for a producer without transactions; kafka-python, the one
client tested that asks (after OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH),
takes the id it is given. The ids come from blocks reserved durably in ``log.dir``
(``segments.producer_ids``; a block is reserved, two fsyncs, at the first
InitProducerId and then once per 1000: a broker no idempotent producer uses writes no
file). On a ZooKeeper cluster each broker hands out ids in its own range, broker id
times 2^44 plus its own count, so that no two brokers ever hand out one id without a
shared counter. A ``transactional.id`` is refused (transactions are not served) with
INVALID_REQUEST; a block that cannot be written, with KAFKA_STORAGE_ERROR (the client
retries).
"""

import logging

from kafka.protocol.producer import InitProducerIdResponse

from mpbroker.acceptor.kafka.answers import respond
from mpbroker.codec.errors import MPBrokerError
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.segments.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

BROKER_RANGE_BITS = 44


class ProducerIds:
    def __init__(self, config):
        self._allocator = ProducerIdAllocator(config.log_dir, config.brokerid)
        self._base = config.brokerid << BROKER_RANGE_BITS if config.enable_zookeeper else 0

    def handle(self, connection, request_header, request) -> None:
        version = request_header.api_version
        error, producer_id = KafkaError.NONE, -1
        if request.transactional_id is not None:
            log.info("%r: InitProducerId for transactional id %r refused: transactions are not served", connection,
                     request.transactional_id)
            error = KafkaError.INVALID_REQUEST
        else:
            try:
                producer_id = self._base + self._allocator.next_id()
            except MPBrokerError as exc:
                log.error("InitProducerId: %s", exc)
                error = KafkaError.KAFKA_STORAGE_ERROR
        respond(connection, request_header.correlation_id, ApiKey.INIT_PRODUCER_ID, version,
                InitProducerIdResponse[version](throttle_time_ms=0, error_code=error, producer_id=producer_id,
                                                producer_epoch=0 if producer_id >= 0 else -1))
