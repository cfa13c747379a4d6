"""Partition workers: the processes that own partition logs.

- ``worker``: the worker process (event loop, timers, control messages, shutdown);
- ``produce_handler``: a batch of produce records -> validated appends and answers;
- ``flusher``: fdatasync on background threads, with waiters for flush acks;
- ``publisher``: the worker's partition states in the shared partition table.
"""
