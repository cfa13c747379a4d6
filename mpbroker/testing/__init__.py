"""Helpers for the tests, the benchmarks and the demo, apart from the production modules:
a broker (``local_broker``) and a ZooKeeper server (``local_zookeeper``) run as child
processes on this machine. Nothing in the broker or the clients imports them."""
