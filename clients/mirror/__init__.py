"""The mirror (0.7's MirrorMaker): a consumer group on a source cluster and a producer to a
target cluster (``mirror_maker``), where each message lands (``placement``) and what it
counts (``metrics``)."""
