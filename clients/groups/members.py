"""Reading a consumer group's members and their subscriptions from ZooKeeper (watched),
for the connector's rebalance.

A member whose registration does not parse (``layout.parse_subscription``: neither a
0.7 form nor mpbroker's earlier JSON one) is a member with no subscription: it gets no
stream, so the range assignment shares every partition among the members that can be
read, and none is left to a stream that may never claim it. (Counting it would need a
stream count and topics nobody can know; 0.7 fails the rebalance on it, and after
``rebalance.retries.max`` the whole group stops consuming.) If that member consumes
all the same -- a client writing a form unknown here -- its claims and ours collide on
the owner nodes and the rebalance retries: visible in the logs, nothing skipped. It is
logged at WARNING, with the group, its id and its value, once per value;
``mpbroker-groups --describe`` lists it as ``invalid``.
"""

import logging

from kazoo.exceptions import NoNodeError

from mpbroker.registry import layout

log = logging.getLogger("mpbroker.clients.groups.connector")  # one logger for the connector's lines


def read_members(client, group: str, watch, warned: dict, ours: dict) -> dict:
    """``{consumer id: Subscription}`` of ``group``'s members, the children watched with
    ``watch``; ``warned`` (consumer id -> the value warned about) is kept across calls;
    ``ours`` (``{our id: our Subscription}``) counts even before our node is seen."""
    subscriptions = {}
    ids_path = layout.consumer_ids_path(group)
    members = client.get_children(ids_path, watch=watch)
    for gone in set(warned).difference(members):
        del warned[gone]
    for consumer in members:
        try:
            data, _ = client.get(f"{ids_path}/{consumer}")  # another client's id: any node name
            subscriptions[consumer] = layout.parse_subscription(data)
        except NoNodeError:
            continue
        except layout.LayoutError:
            if warned.get(consumer) != data:
                warned[consumer] = data
                log.warning("group %s: member %s registered %r, which is no subscription this client can read; "
                            "it is given no partitions (the others share them all)", group, consumer, data[:200])
    for consumer, subscription in ours.items():
        subscriptions.setdefault(consumer, subscription)
    return subscriptions
