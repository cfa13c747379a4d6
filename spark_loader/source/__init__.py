"""The ``mpbroker`` source of Spark Structured Streaming and batch queries (PySpark's
Python Data Source API): ``options`` (checked on the driver), ``offsets`` (the
checkpoint's form), ``planner`` (driver: partitions, log ends, read limits, splits),
``partition_reader`` (executors: one range as Arrow batches), ``data_source`` (the
classes Spark instantiates). ``register_source(spark)`` makes the format known."""


def register_source(spark) -> None:
    """``spark.dataSource.register`` of the ``mpbroker`` format (imports PySpark)."""
    from mpbroker.spark_loader.source.data_source import register_source as register

    register(spark)
