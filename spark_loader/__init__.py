"""The PySpark loader that copies new messages of each partition into Parquet and
stores offsets only after the load committed. Arrives with the Spark loader issue."""
