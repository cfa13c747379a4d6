"""Making kazoo clients from a ``zk.connect`` string, for the broker and the clients.

``zk.connect`` is ``host:port[,host:port][/chroot]``. kazoo runs every operation
under the chroot but does not create it, so ``ensure_chroot`` does, through a short
session without one. The client retries its connection for ever (a ZooKeeper that is
down must not stop its user); operations raise ConnectionLoss while it is away.
"""

import logging
import warnings

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, OperationTimeoutError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from mpbroker.registry.layout import split_zk_connect

log = logging.getLogger(__name__)

# A call that may well work when tried again (ZooKeeper away, or slow to answer).
TRANSIENT = (ConnectionLoss, OperationTimeoutError, KazooTimeoutError)
# Anything a ZooKeeper call can raise.
ZK_ERRORS = (KazooException, KazooTimeoutError)


class ZooKeeperUnavailable(Exception):
    """No ZooKeeper server answered in time."""


def make_client(zk_connect: str, session_timeout_ms: int = 6000, *, read_only: bool = False) -> KazooClient:
    hosts, chroot = split_zk_connect(zk_connect)
    retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0)
    return KazooClient(hosts=hosts + chroot, timeout=session_timeout_ms / 1000, connection_retry=retry,
                       read_only=read_only, logger=logging.getLogger("kazoo.client"))


def ensure_chroot(zk_connect: str, timeout_s: float) -> None:
    """Create the chroot of ``zk_connect`` (if it has one and it does not exist yet)."""
    hosts, chroot = split_zk_connect(zk_connect)
    if not chroot:
        return
    client = KazooClient(hosts=hosts, timeout=max(timeout_s, 1.0))
    try:
        client.start(timeout_s)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(f"no ZooKeeper answered at {hosts} within {timeout_s:g}s") from None
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()


def start_client(zk_connect: str, session_timeout_ms: int, connection_timeout_ms: int, *,
                 create_chroot: bool = True) -> KazooClient:
    """A started client, or ZooKeeperUnavailable after the timeout. The chroot is
    created unless ``create_chroot`` is false (a reader: a missing chroot is empty)."""
    timeout_s = connection_timeout_ms / 1000
    if create_chroot:
        ensure_chroot(zk_connect, timeout_s)
    client = make_client(zk_connect, session_timeout_ms)
    try:
        with warnings.catch_warnings():  # kazoo warns of a missing chroot; see create_chroot
            warnings.filterwarnings("ignore", "No chroot path exists")
            client.start(timeout_s)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(f"no ZooKeeper answered at {zk_connect} within {timeout_s:g}s") from None
    return client


def close_client(client: KazooClient) -> None:
    """End the session (its ephemeral nodes go at once) and free the client's threads."""
    try:
        client.stop()
    finally:
        client.close()
