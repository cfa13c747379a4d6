"""Helpers for the tests, the benchmarks and the demo, apart from the production modules:
a broker (``local_broker``), a ZooKeeper server (``local_zookeeper``) and a Spark
standalone cluster (``spark_cluster``) run as child processes on this machine. Nothing
in the broker or the clients imports them."""
