"""The ZooKeeper layout (Kafka 0.7's paths and node formats: ``layout``) and the kazoo
client helpers every ZooKeeper user shares (``zk_client``): the broker's registrar, the
clients and the tools. The broker's own ZooKeeper process is ``mpbroker.registrar``."""
