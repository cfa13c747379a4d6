"""The broker's configuration: a Java-properties file with Kafka 0.7 key names.

One module per concern, imported from where it lives (this package re-exports nothing):

- ``errors``: ``ConfigError``, every refusal, naming the key, the bad value and what was
  expected;
- ``properties``: the java.util.Properties text format (``parse_properties``), read from a
  file or from ``--override key=value`` options;
- ``keys``: the registry of every key mpbroker understands (``KEYS``, with type, default,
  limits and one line of help), the keys known from Kafka 0.7 but without effect here
  (``IGNORED_KEYS``, only warned about), the later Kafka (0.8+) names of the 0.7 keys
  (``ALIASES``) and the example configuration generated from them (``render_properties``);
- ``values``: the syntax of each kind of value and the checks of a typed value;
- ``broker_config``: the typed and validated result (``BrokerConfig``, with the per-topic
  settings ``partitions_for`` and ``log_config_for``) and building it
  (``config_from_properties``, ``load_config``): later names are read as their 0.7 keys,
  an unknown key is refused with the closest known name unless ``allow.unknown.keys``
  (``mpbroker serve --allow-unknown-keys``) turns that into a warning.
"""
