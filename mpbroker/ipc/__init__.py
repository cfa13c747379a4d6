"""Inter-process plumbing of one broker, all made by the supervisor before it forks:

- ``ring``: single-producer single-consumer byte rings in anonymous shared memory,
  woken through eventfds (acceptor -> worker requests, worker -> acceptor answers);
- ``partition_table``: each worker's published partition states (seqlocked), read by
  the acceptor to serve fetches from segment files and by the supervisor for status;
- ``slot_table``: the state of every worker slot (pid, generation, heartbeat);
- ``control``: small JSON messages over socketpairs between the supervisor and its
  children;
- ``shared_memory``: all of the shared memory above, made at once.
"""
