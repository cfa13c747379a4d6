"""The offline half of the design, on Spark. ``job``: a PySpark job that copies what is
new in the broker into Parquet, one Spark task per (broker, topic, partition), and
stores the offsets only once the data is committed; ``mpbroker-spark-load`` is its
command. ``source``: the ``mpbroker`` format of Spark Structured Streaming and batch
queries (``register_source(spark)``, then ``spark.readStream.format("mpbroker")``)."""

from mpbroker.spark_loader.source import register_source

__all__ = ["register_source"]
