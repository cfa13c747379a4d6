"""The pieces of ``bench/latency_bench.py``: timestamped messages, a producer that sends
them at a steady rate from a process of its own, and percentiles."""
