"""The range assignment of the 0.7 rebalance (PROTOCOL.md), free of I/O.

For one topic: the partitions ``<broker>-<partition>`` sorted (numerically, by broker
then partition) and the group's stream ids sorted; with ``n = partitions // streams``
and ``extra = partitions % streams``, stream ``i`` takes ``n + (1 if i < extra else 0)``
partitions starting at ``n*i + min(i, extra)``. Every consumer computes the same
answer from the same view, so the streams' shares are disjoint and cover the topic.
A member whose registration cannot be read has no streams here: the partitions go to
the streams that can be counted (``mpbroker.clients.groups.members`` says why).
"""


def assign_range(partitions, stream_ids) -> dict:
    """``{stream id: [partition, ...]}`` for every stream id (some may get none)."""
    partitions = sorted(partitions)
    stream_ids = sorted(stream_ids)
    if not stream_ids:
        return {}
    share, extra = divmod(len(partitions), len(stream_ids))
    assignment = {}
    for index, stream in enumerate(stream_ids):
        start = share * index + min(index, extra)
        assignment[stream] = partitions[start:start + share + (1 if index < extra else 0)]
    return assignment
