"""The admin client the modern group tools talk through: kafka-python's
``KafkaAdminClient`` (ListGroups on every broker Metadata names, DescribeGroups,
OffsetFetch and OffsetCommit at each group's coordinator, ListOffsets at each
partition's leader, DeleteGroups), and its errors told apart.

    with connect("localhost:9093", timeout_ms=10000) as admin:
        ...

``Unreachable``: no broker answered (bootstrap, a connection, a request timed out);
``BrokerAnswered``: an error answer. Answers that say "ask again" (the coordinator
still loading its offsets after a restart, or moved) are asked again within the
timeout (``retrying``).
"""

import contextlib
import logging
import time

import kafka.errors as kafka_errors
from kafka import KafkaAdminClient

TIMEOUT_MS = 10000
RETRY_S = 0.2

_UNREACHABLE = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError, kafka_errors.BrokerNotAvailableError,
                kafka_errors.RequestTimedOutError, kafka_errors.NodeNotReadyError)
_TRY_AGAIN = (kafka_errors.CoordinatorLoadInProgressError, kafka_errors.NotCoordinatorError,
              kafka_errors.CoordinatorNotAvailableError)


class Unreachable(Exception):
    """No broker answered in time."""


class BrokerAnswered(Exception):
    """A broker answered with an error (``name``: Kafka's name of it)."""

    def __init__(self, message: str, name: str = ""):
        super().__init__(message)
        self.name = name


def error_name(error) -> str:
    """``NON_EMPTY_GROUP`` for kafka-python's NonEmptyGroupError (class or instance)."""
    cls = error if isinstance(error, type) else type(error)
    return getattr(cls, "message", None) or cls.__name__


@contextlib.contextmanager
def connect(bootstrap: str, timeout_ms: int = TIMEOUT_MS):
    """An admin client of the cluster ``bootstrap`` (``HOST:PORT[,HOST:PORT...]``),
    closed on leaving; Unreachable when no broker answers within ``timeout_ms``."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its connection errors are ours to report
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=timeout_ms,
                                 bootstrap_timeout_ms=timeout_ms, client_id="mpbroker-groups")
    except _UNREACHABLE as exc:
        raise Unreachable(f"no broker at {bootstrap} answered within {timeout_ms} ms ({error_name(exc)})") from None
    except kafka_errors.KafkaError as exc:
        raise BrokerAnswered(f"{bootstrap}: {exc}", error_name(exc)) from None
    admin.timeout_ms = timeout_ms
    try:
        yield admin
    finally:
        admin.close()


def retrying(admin, call, *args, **kwargs):
    """``call(*args, **kwargs)`` (a method of ``admin``), asked again while the answer is
    a coordinator loading or moving, within the admin's timeout; kafka-python's errors
    as Unreachable or BrokerAnswered."""
    deadline = time.monotonic() + getattr(admin, "timeout_ms", TIMEOUT_MS) / 1000
    while True:
        try:
            return call(*args, **kwargs)
        except _TRY_AGAIN as exc:
            if time.monotonic() >= deadline:
                raise BrokerAnswered(f"the group coordinator answered {error_name(exc)}", error_name(exc)) from None
            time.sleep(RETRY_S)
        except _UNREACHABLE as exc:
            raise Unreachable(f"a broker did not answer ({error_name(exc)}: {exc})") from None
        except kafka_errors.KafkaError as exc:
            raise BrokerAnswered(f"a broker answered {error_name(exc)}", error_name(exc)) from None
