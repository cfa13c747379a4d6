"""A consumer connector's nodes under ``/consumers/<group>``: its owner nodes
(``owners/<topic>/<partition>``, ephemeral, valued ``<consumer id>-<stream>``) and the
offsets it commits (``offsets/<topic>/<partition>``, persistent, a decimal offset).

A claim goes partition by partition in sorted order; one whose node is held by
someone else (any other value, or ours from another session) stops the claim: the
caller releases what it claimed, backs off and retries. The node in the way is
watched, so the back-off ends when its owner lets go. Releasing deletes only nodes of
the current session, so a node a new session of someone else created is left alone.
A commit writes only the offsets that moved past what was committed last.
"""

import logging

from kazoo.exceptions import NodeExistsError, NoNodeError

from mpbroker.registry import layout

log = logging.getLogger("mpbroker.clients.groups.connector")  # one logger for the connector's lines


def claim(client, group: str, consumer_id: str, wanted: dict, session: int, watch) -> tuple:
    """Create the owner node of each ``(topic, PartitionId) -> stream index`` of
    ``wanted``; returns ``(paths claimed, None)``, or at the first node in the way
    ``(paths claimed before it, gone)``: ``gone`` is true when that node went meanwhile
    (retry at once), else it is watched with ``watch``."""
    claimed = []
    for (topic, partition), index in sorted(wanted.items()):
        path = layout.owner_path(group, topic, partition)
        value = layout.stream_id(consumer_id, index).encode()
        try:
            client.create(path, value, ephemeral=True, makepath=True)
        except NodeExistsError:
            try:
                data, stat = client.get(path)
            except NoNodeError:
                data, stat = None, None
            if not (data == value and stat.ephemeralOwner == session):
                log.info("consumer %s: %s-%s is still owned by %s", consumer_id, topic, partition.node(),
                         data.decode(errors="replace") if data else "(gone)")
                return claimed, client.exists(path, watch=watch) is None
        claimed.append(path)
    return claimed, None


def release(client, paths) -> None:
    """Delete the nodes of ``paths`` that the client's current session created."""
    session = client.client_id[0] if client.client_id else None
    for path in paths:
        try:
            _, stat = client.get(path)
            if stat.ephemeralOwner == session:
                client.delete(path, version=stat.version)
        except NoNodeError:
            pass


def read_offset(client, group: str, topic: str, partition) -> int:
    """The committed offset of ``partition``; -1 if there is none or it does not parse
    (the fetcher then starts per ``autooffset.reset``)."""
    try:
        data, _ = client.get(layout.offset_path(group, topic, partition))
        return layout.parse_offset(data)
    except NoNodeError:
        return -1
    except layout.LayoutError as exc:
        log.warning("%s-%s: %s; starting per autooffset.reset", topic, partition.node(), exc)
        return -1


def commit(client, group: str, owned: dict, returned: bool) -> None:
    """Store, for each ``(topic, PartitionId) -> PartitionTopicInfo`` of ``owned``, the
    offset after the last message handed out (``returned``) or finished."""
    for (topic, partition), info in list(owned.items()):
        offset = info.returned_offset if returned else info.done_offset
        if offset < 0 or offset <= info.committed_offset:
            continue
        path = layout.offset_path(group, topic, partition)
        value = str(offset).encode()
        try:
            client.set(path, value)
        except NoNodeError:
            try:
                client.create(path, value, makepath=True)
            except NodeExistsError:
                client.set(path, value)
        info.committed_offset = offset
