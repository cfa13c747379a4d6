"""What ``mpbroker-console-consumer`` prints before a message's payload.

Both reading modes (``--broker-list`` and ``--zookeeper``) print a message the same way:
the prefixes the options ask for -- ``<partition>`` with ``--print-partition``,
``offset=<offset> next_offset=<next offset>`` with ``--print-offset``, ``<created ms>
<host>/<client>`` (``-`` without an envelope) with ``--print-envelope``, then for a record
of a partition modern producers wrote ``timestamp=<ms>`` with ``--print-timestamp``, its
headers ``<key>:<value>,...`` (``NO_HEADERS``) with ``--print-headers`` and its key
(``null`` without one) with ``--print-key``; a 0.7 message prints ``timestamp=-``,
``NO_HEADERS`` and ``null`` -- each followed by a TAB, then the payload (a record's value)
and a newline. This module owns those prefixes.
"""


def message_prefix(args, partition: bytes, offset: int | None, next_offset: int, envelope, key=None, headers=(),
                   timestamp=None) -> bytes:
    """The prefixes ``args`` asks for, of a message of ``partition`` (its label) that starts
    at ``offset`` (read only with --print-offset) and carried ``envelope`` (or None)."""
    prefix = b""
    if args.print_partition:
        prefix += partition + b"\t"
    if args.print_offset:
        prefix += b"offset=%d next_offset=%d\t" % (offset, next_offset)
    if args.print_envelope:
        prefix += _envelope_label(envelope)
    if args.print_timestamp:
        prefix += b"timestamp=-\t" if timestamp is None else b"timestamp=%d\t" % timestamp
    if args.print_headers:
        prefix += _headers_label(headers) + b"\t"
    if args.print_key:
        prefix += (b"null" if key is None else key) + b"\t"
    return prefix


def _headers_label(headers) -> bytes:
    if not headers:
        return b"NO_HEADERS"
    return b",".join(key.encode("utf-8", "replace") + b":" + (b"null" if value is None else value)
                     for key, value in headers)


def _envelope_label(envelope) -> bytes:
    if envelope is None:
        return b"-\t"
    return f"{envelope.created_ms} {envelope.host}/{envelope.client}\t".encode()
