"""The broker's registrations in ZooKeeper, in the Kafka 0.7 layout (see ``layout``)."""

EXIT_ID_CONFLICT = 78  # the registrar's exit code when a live broker holds this broker id (EX_CONFIG)
