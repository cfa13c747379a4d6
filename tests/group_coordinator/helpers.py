"""Shared by the group coordinator's tests: a reply that records what it was called
with, and short ways to send each request."""

from mpbroker.group_coordinator import GroupCoordinator, JoinRequest
from mpbroker.kafka_protocol.errors import KafkaError

SESSION = 10_000
REBALANCE = 30_000


class Reply:
    """A reply callback; ``result`` is its one answer (None while it waits)."""

    def __init__(self):
        self.results = []

    def __call__(self, result):
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def result(self):
        assert len(self.results) <= 1, self.results
        return self.results[0] if self.results else None


def coordinator(**settings) -> GroupCoordinator:
    settings.setdefault("initial_rebalance_delay_ms", 1)
    return GroupCoordinator(**settings)


def join(coord, now, group="g", member_id="", instance=None, client="client", session=SESSION,
         rebalance=REBALANCE, protocol_type="consumer", protocols=(("range", b"meta"),), require_known=False) -> Reply:
    reply = Reply()
    coord.join(now, JoinRequest(group, member_id, instance, client, "/10.0.0.1", session, rebalance,
                                protocol_type, tuple(protocols), require_known), reply)
    return reply


def sync(coord, now, group, generation, member_id, assignments=None, instance=None) -> Reply:
    reply = Reply()
    coord.sync(now, group, generation, member_id, instance, None, None, assignments or {}, reply)
    return reply


def settle(coord, now, group="g", members=("a", "b"), protocols=(("range", b"meta"),)):
    """A Stable group of new members (joined 2 ms before ``now``: the initial delay of
    ``coordinator()``, 1 ms, and once more for the members after the first), synced at
    ``now`` with assignments b"<client>"; their JoinResults in order (the first leads)."""
    replies = [join(coord, now - 2, group, client=name, protocols=protocols) for name in members]
    coord.tick(now)
    results = [reply.result for reply in replies]
    assert all(r.error == KafkaError.NONE for r in results), results
    leader = results[0].leader
    ids = {r.member_id: name for r, name in zip(results, members)}
    syncs = [sync(coord, now, group, r.generation_id, r.member_id,
                  {m: ids[m].encode() for m in ids} if r.member_id == leader else None) for r in results]
    assert all(s.result.error == KafkaError.NONE for s in syncs)
    return results
