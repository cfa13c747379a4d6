"""Every command-line entry point of the project (the top layer), one module per command:

- ``broker``: ``mpbroker serve CONFIG`` (also ``python -m mpbroker``);
- ``ctl``: ``mpbroker-ctl``, the running broker's control socket;
- ``demo``: ``mpbroker-demo``;
- ``console_producer``, ``console_consumer``, ``get_offsets``: ``mpbroker-console-producer``,
  ``mpbroker-console-consumer``, ``mpbroker-get-offsets`` (the console consumer's options,
  its two modes and its output are ``console_consumer_args``, ``console_consumer_brokers``,
  ``console_consumer_group`` and ``console_consumer_output``);
- ``groups``: ``mpbroker-groups`` (consumer groups: list, describe, reset offsets, delete);
- ``mirror``: ``mpbroker-mirror``; ``audit``: ``mpbroker-audit``;
- ``spark_load``: ``mpbroker-spark-load``.

Each parses its arguments, calls the layers below, and turns their errors into messages
and exit codes (``failure.fail``: the one line on standard error and the code); nothing
below imports a command.
"""
