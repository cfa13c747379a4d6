"""The acceptor: the broker's network process.

- ``acceptor``: the event loop (listener, connections, answer rings, supervisor);
- ``requests``: what each request type does (fetch and OFFSETS served here from the
  segment files, produce routed to the owning worker);
- ``connection``: one client connection: frames in, ordered responses out, with
  vectored writes and ``sendfile``; it owns its state (paused, throttled, closing)
  and says which selector events it wants;
- ``segment_files``: the read side of the workers' partition tables and an fd cache
  of segment files;
- ``routing``: request rings to the workers, in-flight produces, worker up/down;
- ``limits``: connections per address, and the sweep for idle and slow connections.
"""
