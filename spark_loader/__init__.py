"""The offline half of the design: a PySpark job that copies what is new in the broker
into Parquet, one Spark task per (broker, topic, partition), and stores the offsets
only once the data is committed (``job``). ``mpbroker-spark-load`` is its command."""
