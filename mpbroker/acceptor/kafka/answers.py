"""Modern answers on their way out: a response body behind its header and size."""

from mpbroker.kafka_protocol import api, header, messages


def respond(connection, correlation_id: int, api_key: int, version: int, answer) -> None:
    """Queue ``answer`` (a kafka-python response object) as the connection's next answer."""
    connection.respond([framed(correlation_id, api_key, version, messages.encode_body(answer, version))])


def fill(response, correlation_id: int, api_key: int, version: int, answer) -> None:
    """Fill ``response`` (an answer the connection reserved in its queue earlier) with
    ``answer``: ``respond`` for an answer that comes later than its request."""
    response.fill([framed(correlation_id, api_key, version, messages.encode_body(answer, version))])


def framed(correlation_id: int, api_key: int, version: int, body: bytes) -> bytes:
    """``[int32 size][response header][body]``."""
    head = header.response_header(correlation_id, api.response_header_flexible(api_key, version))
    return header.frame(len(head) + len(body)) + head + body
