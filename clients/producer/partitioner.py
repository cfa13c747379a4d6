"""Choosing a partition for a message.

The default: ``xxhash64(key) % num_partitions`` for a keyed message (the same key
always lands on the same partition, in every process and on every machine), a
random partition for a message without a key. The producer applies the random choice
once per topic per batch (a ``send`` call, or an async batch) rather than per message:
a batch of keyless messages becomes one request (and one compressed set), and the
batches still spread evenly over the partitions. ``partitioner.class`` replaces it: a
callable ``(key, num_partitions) -> int``, or the dotted name of a class whose
instances have ``partition(key, num_partitions)`` (0.7's Partitioner interface).
"""

import importlib
import random

import xxhash


def default_partitioner(key, num_partitions: int) -> int:
    if key is None:
        return random.randrange(num_partitions)
    if isinstance(key, str):
        key = key.encode("utf-8")
    return xxhash.xxh64_intdigest(key) % num_partitions


def load_partitioner(spec):
    """A callable ``(key, num_partitions) -> int`` from ``partitioner.class``."""
    if spec is None:
        return default_partitioner
    if isinstance(spec, str):
        module_name, _, attribute = spec.rpartition(".")
        if not module_name:
            raise ValueError(f"partitioner.class {spec!r} is not a dotted name")
        spec = getattr(importlib.import_module(module_name), attribute)
        if isinstance(spec, type):
            spec = spec()
    if hasattr(spec, "partition"):
        return spec.partition
    if callable(spec):
        return spec
    raise ValueError(f"partitioner.class {spec!r} is neither callable nor has partition()")
