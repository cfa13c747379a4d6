"""The broker's ZooKeeper child process (only with ``enable.zookeeper``): it registers the
broker and its topics (``registrar``, ``broker_registration``) in the layout of
``mpbroker.registry``. Kazoo runs threads, so ZooKeeper lives in a child of its own and
the supervisor stays single-threaded."""

EXIT_ID_CONFLICT = 78  # the registrar's exit code when a live broker holds this broker id (EX_CONFIG)
