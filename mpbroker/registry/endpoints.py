"""Where each broker serves the modern Kafka protocol, in ZooKeeper. No I/O here.

    /brokers/endpoints/<broker id>    {"version":1,"host":"<host>","port":<kafka port>}   ephemeral

Beside the 0.7 registration (``/brokers/ids/<id>``, ``creator:host:port``, whose form 0.7
clients parse and which therefore does not change), written by the same session, so it
comes and goes with the broker. Metadata on any broker lists every broker from these
(``registrar.cluster_view``). A broker with ``kafka.port=-1`` writes none.
"""

import json

from mpbroker.registry.layout import LayoutError

ENDPOINTS = "/brokers/endpoints"


def endpoint_path(broker_id: int) -> str:
    return f"{ENDPOINTS}/{int(broker_id)}"


def endpoint_value(host: str, port: int) -> bytes:
    return json.dumps({"version": 1, "host": host, "port": int(port)}, separators=(",", ":")).encode()


def parse_endpoint(broker_id, value: bytes) -> tuple:
    """``(host, port)`` of a broker's modern endpoint; LayoutError if it does not parse."""
    try:
        document = json.loads(value)
        host, port = document["host"], int(document["port"])
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise LayoutError(f"broker {broker_id}: endpoint {value[:100]!r} is not {{host, port}}") from None
    if not isinstance(host, str) or not host or not 0 < port < 65536:
        raise LayoutError(f"broker {broker_id}: endpoint {value[:100]!r} has no usable host:port")
    return host, port
