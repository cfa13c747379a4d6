"""Hooks around a producer's batches (0.7's ``callback.handler`` idea), for tracing,
counting or enriching messages.

``callback.handler`` is an object, or the dotted name of a class (instantiated with
no arguments), with any of these methods:

- ``before_enqueue(topic, key, payload)``: returns the payload to send (possibly
  changed), or None to drop the message; called by ``send``;
- ``before_send(batch)``: a list of ``(topic, key, payload)`` about to be sent;
  returns the batch to send;
- ``after_send(batch, results)``: the batch went out; ``results`` are SendResults;
- ``on_error(batch, error)``: the batch could not be delivered.
"""

import importlib


class NoCallbacks:
    def before_enqueue(self, topic, key, payload):
        return payload

    def before_send(self, batch):
        return batch

    def after_send(self, batch, results):
        pass

    def on_error(self, batch, error):
        pass


class _Wrapped(NoCallbacks):
    """Fills in the methods a user's handler leaves out."""

    def __init__(self, handler):
        self._handler = handler
        for name in ("before_enqueue", "before_send", "after_send", "on_error"):
            method = getattr(handler, name, None)
            if method is not None:
                setattr(self, name, method)


def load_callbacks(spec):
    if spec is None:
        return NoCallbacks()
    if isinstance(spec, str):
        module_name, _, attribute = spec.rpartition(".")
        if not module_name:
            raise ValueError(f"callback.handler {spec!r} is not a dotted name")
        spec = getattr(importlib.import_module(module_name), attribute)()
    return _Wrapped(spec)
