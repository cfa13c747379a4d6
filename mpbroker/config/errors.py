"""The one exception of mpbroker.config: ``ConfigError``, the refusal of a configuration.

Apart from the modules that raise it (the properties reader, the value checks, the
loading), so each of them can import it without importing the others; callers catch it
to turn a bad configuration into one line and exit code 2.
"""


class ConfigError(ValueError):
    """The configuration was refused; the message names the key, value and expectation."""
