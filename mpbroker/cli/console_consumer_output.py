"""What ``mpbroker-console-consumer`` prints before a message's payload.

Both reading modes (``--broker-list`` and ``--zookeeper``) print a message the same way:
the prefixes the options ask for -- ``<partition>`` with ``--print-partition``,
``offset=<offset> next_offset=<next offset>`` with ``--print-offset``, ``<created ms>
<host>/<client>`` (``-`` without an envelope) with ``--print-envelope`` -- each followed by
a TAB, then the payload and a newline. This module owns those prefixes.
"""


def message_prefix(args, partition: bytes, offset: int | None, next_offset: int, envelope) -> bytes:
    """The prefixes ``args`` asks for, of a message of ``partition`` (its label) that starts
    at ``offset`` (read only with --print-offset) and carried ``envelope`` (or None)."""
    prefix = b""
    if args.print_partition:
        prefix += partition + b"\t"
    if args.print_offset:
        prefix += b"offset=%d next_offset=%d\t" % (offset, next_offset)
    if args.print_envelope:
        prefix += _envelope_label(envelope)
    return prefix


def _envelope_label(envelope) -> bytes:
    if envelope is None:
        return b"-\t"
    return f"{envelope.created_ms} {envelope.host}/{envelope.client}\t".encode()
