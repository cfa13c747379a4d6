"""The modern Kafka protocol's wire codec (request headers, the API versions served,
error codes, request and response bodies), beside the 0.7 codec in ``mpbroker.codec``.
Sans-IO."""
