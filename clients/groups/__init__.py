"""Consumer groups through ZooKeeper: the consumer connector (``connector``: registration,
rebalance, fetchers, streams, committed offsets) with its settings and topic filters, and
the operators' side of a group (``report``: offsets, log ends and lag; ``admin``: offset
resets and deletion)."""
