"""Request and response bodies of the cold-path APIs, through kafka-python's message
classes.

kafka-python 3 generates its request and response classes from Kafka's own JSON
message specs (every field of every version, flexible encodings included), so the
listener decodes requests and encodes answers with them instead of a hand-written
copy of those specs. The hot paths do not go through here: the Fetch answer is
encoded by hand around the file ranges it sends (``fetch``), and the records of a
produce are handed on as the bytes they came in.
"""

import functools

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest, ProduceResponse

from mpbroker.codec.framing import MalformedRequestError
from mpbroker.kafka_protocol.api import ApiKey

REQUESTS = {
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.FETCH: FetchRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
    ApiKey.DESCRIBE_ACLS: DescribeAclsRequest,
    ApiKey.OFFSET_COMMIT: OffsetCommitRequest,
    ApiKey.OFFSET_FETCH: OffsetFetchRequest,
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
    ApiKey.JOIN_GROUP: JoinGroupRequest,
    ApiKey.HEARTBEAT: HeartbeatRequest,
    ApiKey.LEAVE_GROUP: LeaveGroupRequest,
    ApiKey.SYNC_GROUP: SyncGroupRequest,
    ApiKey.DESCRIBE_GROUPS: DescribeGroupsRequest,
    ApiKey.LIST_GROUPS: ListGroupsRequest,
    ApiKey.DELETE_GROUPS: DeleteGroupsRequest,
}

__all__ = ["REQUESTS", "decode_body", "encode_body", "ApiVersionsResponse", "MetadataResponse", "ProduceResponse",
           "ListOffsetsResponse", "CreateTopicsResponse", "DeleteTopicsResponse"]


def decode_body(api_key: int, version: int, body):
    """The request body as kafka-python's message object; MalformedRequestError if the
    bytes do not hold one of that version, or hold a null where the spec allows none:
    kafka-python reads a length of -1 as None whatever the field, Kafka refuses the
    request ("non-nullable field ... was serialized as null"), and no handler here
    has to meet a None it was promised never to see."""
    try:
        request = REQUESTS[api_key].decode(body, version=version)
    except MalformedRequestError:
        raise
    except Exception as exc:  # the library raises ValueError, struct.error, IndexError, UnicodeDecodeError...
        raise MalformedRequestError(f"cannot decode {ApiKey(api_key).name} v{version}: {exc}") from exc
    null = _null_field(_null_checks(api_key, version), request)
    if null is not None:
        raise MalformedRequestError(f"{ApiKey(api_key).name} v{version}: the non-nullable field {null} is null")
    return request


# Field types whose decoded value is never None (kafka-python reads a number, a bool or
# a uuid whatever the bytes); every other field (a string, bytes, records, an array, a
# struct) may come out as None.
_NEVER_NULL = frozenset({"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid"})


@functools.lru_cache(maxsize=None)
def _null_checks(api_key: int, version: int) -> tuple:
    """What to look at in a request of ``version``, worked out once from the spec:
    ``(attribute, spec name, nullable, checks of its items or of itself)`` for each field
    that may decode as None and is either not nullable or holds such fields. A Fetch
    with many partitions costs a few attribute reads per partition instead of a walk of
    the spec's fields (which took longer than decoding the request)."""
    return _checks(REQUESTS[api_key].fields, version)


def _checks(fields: dict, version: int) -> tuple:
    found = []
    for name, field in fields.items():
        if not field.for_version_q(version) or field.tagged_field_q(version) or field.type_str in _NEVER_NULL:
            continue
        inner = _checks(field.fields, version) if field.is_struct_array() or field.is_struct() else ()
        nullable = field.nullable_for_version_q(version)
        if not nullable or inner:
            found.append((name, field._name, nullable, field.is_struct_array(), inner))
    return tuple(found)


def _null_field(checks: tuple, data):
    """The spec name of the first field of ``data`` (or of the structs in it) that is
    None though not nullable; None if there is none."""
    for name, spec_name, nullable, is_array, inner in checks:
        value = getattr(data, name, None)
        if value is None:
            if not nullable:
                return spec_name
        elif inner:
            for item in (value if is_array else (value,)):
                found = _null_field(inner, item)
                if found is not None:
                    return found
    return None


def encode_body(response, version: int) -> bytes:
    """A response object's body in ``version`` (no header, no size)."""
    return bytes(response.encode(version=version))


def _every_message_class() -> dict:
    """``{(api key, "request" | "response"): class}`` for every API kafka-python knows."""
    import importlib
    import inspect
    import pkgutil

    import kafka.protocol
    from kafka.protocol.api_message import ApiMessage

    found = {}
    for module_info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        try:
            module = importlib.import_module(module_info.name)
        except Exception:  # a module of the library that does not import here: its APIs stay unknown
            continue
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, ApiMessage) and getattr(value, "_json", None):
                kind = value._json.get("type")
                if kind in ("request", "response"):
                    found.setdefault((value._json["apiKey"], kind), value)
    return found


_EVERY = None


def unserved_answer(api_key: int, version: int):
    """For an API this broker does not serve: ``(request class, response object)`` with
    its top-level error set to UNSUPPORTED_VERSION, when kafka-python knows the API and
    version and its answer has a top-level error; else None (no answer of that form can
    be made)."""
    global _EVERY
    if _EVERY is None:
        _EVERY = _every_message_class()
    request_class = _EVERY.get((api_key, "request"))
    response_class = _EVERY.get((api_key, "response"))
    if request_class is None or response_class is None or not 0 <= version <= response_class.max_version:
        return None
    fields = response_class._struct._fields
    error = {field.name: field for field in (fields.values() if isinstance(fields, dict) else fields)}.get("error_code")
    if error is None or not error.for_version_q(version):
        return None
    return request_class, response_class[version](error_code=35)
