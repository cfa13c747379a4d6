"""The pieces of ``bench/latency_bench.py``: timestamped messages, a producer that sends
them at a steady rate from a process of its own, the steady part of a stream and its
percentiles (the stamps, the window and the percentiles serve ``bench/kafka_latency.py`` too)."""
