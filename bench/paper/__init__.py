"""The pieces of ``bench/paper_bench.py``: one module per system that drives it, the
throughput timeline every run records, the report (table, JSON, Markdown) and the plot."""
