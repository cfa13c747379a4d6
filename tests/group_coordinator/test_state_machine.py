"""Random runs of a few clients against one group: joins (new, known, static, asked for
a member id), syncs, heartbeats, commits, leaves and time passing. Whatever happens:
no exception, every reply called exactly once (the last ones when the group is
unloaded), generations never go back, nobody waits on a JoinGroup once the join phase
is over nor on a SyncGroup in a Stable group, and no member outlives its session
unless a JoinGroup or SyncGroup of its own is waiting."""

import math

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mpbroker.group_coordinator import GroupCoordinator, JoinRequest, OffsetAndMetadata
from mpbroker.group_coordinator.group import COMPLETING_REBALANCE, STABLE
from mpbroker.kafka_protocol.errors import KafkaError
from tests.group_coordinator.helpers import Reply

E = KafkaError
NAMES = st.sampled_from(["a", "b", "c"])
PROTOCOLS = st.sampled_from([(("range", b"r"),), (("rr", b"x"), ("range", b"y")), (("rr", b"z"),)])


class Client:
    def __init__(self):
        self.member_id = ""
        self.generation = -1
        self.members = []  # the JoinMembers, when it leads


class GroupMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.coord = GroupCoordinator(min_session_timeout_ms=1000, initial_rebalance_delay_ms=500,
                                      new_member_join_timeout_ms=5000)
        self.now = 0
        self.replies = []
        self.clients = {name: Client() for name in "abc"}
        self.generation = 0

    def _reply(self, client, on_result):
        reply = Reply()

        def answer(result):
            reply(result)
            on_result(client, result)

        answer.reply = reply
        self.replies.append(reply)
        return answer

    @staticmethod
    def _joined(client, result):
        if result.error == E.NONE:
            client.member_id, client.generation, client.members = result.member_id, result.generation_id, result.members
        elif result.error == E.MEMBER_ID_REQUIRED:
            client.member_id = result.member_id
        elif result.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.member_id = ""

    @staticmethod
    def _synced(client, result):
        if result.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            client.member_id = ""

    @rule(name=NAMES, fresh=st.sampled_from([False, False, False, True]), static=st.booleans(), require_known=st.booleans(),
          session=st.sampled_from([1000, 3000]), rebalance=st.sampled_from([1000, 6000]), protocols=PROTOCOLS)
    def join(self, name, fresh, static, require_known, session, rebalance, protocols):
        client = self.clients[name]
        member_id = "" if fresh else client.member_id
        request = JoinRequest("g", member_id, f"i-{name}" if static else None, name, "host", session, rebalance,
                              "consumer", protocols, require_known)
        self.coord.join(self.now, request, self._reply(client, self._joined))

    @rule(name=NAMES, static=st.booleans())
    def sync(self, name, static):
        client = self.clients[name]
        assignments = {m.member_id: m.member_id.encode() for m in client.members}
        self.coord.sync(self.now, "g", client.generation, client.member_id, f"i-{name}" if static else None,
                        None, None, assignments, self._reply(client, self._synced))

    @rule(static=st.booleans(), leader_first=st.booleans())
    def everyone_syncs(self, static, leader_first):
        names = sorted(self.clients, key=lambda n: bool(self.clients[n].members) != leader_first)
        for name in names:
            self.sync(name, static)

    @rule(static=st.booleans(), protocols=PROTOCOLS)
    def everyone_rejoins(self, static, protocols):
        for name in self.clients:
            self.join(name, False, static, True, 3000, 1000, protocols)

    @rule(name=NAMES, static=st.booleans())
    def heartbeat(self, name, static):
        client = self.clients[name]
        error = self.coord.heartbeat(self.now, "g", client.generation, client.member_id,
                                     f"i-{name}" if static else None)
        assert error in (E.NONE, E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION,
                         E.FENCED_INSTANCE_ID)

    @rule(name=NAMES, by_instance=st.booleans())
    def leave(self, name, by_instance):
        client = self.clients[name]
        member = ("", f"i-{name}") if by_instance else (client.member_id, None)
        error, answers = self.coord.leave(self.now, "g", [member])
        assert error == E.NONE and len(answers) == 1

    @rule(name=NAMES, simple=st.booleans())
    def commit(self, name, simple):
        client = self.clients[name]
        if simple:
            error = self.coord.validate_commit(self.now, "g", -1, "", None)
        else:
            error = self.coord.validate_commit(self.now, "g", client.generation, client.member_id, None)
        if error == E.NONE:
            self.coord.commit_done("g", {("t", 0): OffsetAndMetadata(self.now, -1, None, self.now)})

    @rule(elapsed=st.integers(0, 4000))
    def advance(self, elapsed):
        self.now += elapsed
        self.coord.tick(self.now)

    @rule()
    def to_next_deadline(self):
        deadline = self.coord.next_deadline_ms()
        if deadline != math.inf:
            self.now = max(self.now, deadline)
            self.coord.tick(self.now)

    @invariant()
    def replies_answered_at_most_once(self):
        assert all(len(reply.results) <= 1 for reply in self.replies)

    @invariant()
    def group_is_consistent(self):
        group = self.coord._groups.get("g")
        if group is None:
            return
        assert group.generation_id >= self.generation
        event(f"state {group.state}")
        self.generation = group.generation_id
        members = group.members
        assert (group.leader_id in members) if members else group.leader_id is None
        assert group.awaiting_join == sum(m.join_reply is not None for m in members.values())
        for instance_id, member_id in group.static_members.items():
            assert members[member_id].group_instance_id == instance_id
        for member in members.values():
            if group.state in (COMPLETING_REBALANCE, STABLE):
                assert member.join_reply is None
            if group.state == STABLE:
                assert member.sync_reply is None
            if member.is_new or not member.awaiting():
                # not protected by a wait: its session is ahead and a deadline stands for it
                assert member.expires_at > self.now
                assert member.heap_at is not None and member.heap_at <= member.expires_at

    @invariant()
    def the_next_deadline_is_ahead(self):
        # (every call at ``now`` sets its deadlines after ``now``: delays and timeouts are > 0)
        assert self.coord.next_deadline_ms() > self.now

    def teardown(self):
        self.coord.unload(["g"])
        assert all(len(reply.results) == 1 for reply in self.replies), [r.results for r in self.replies]


GroupMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=80, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_group_state_machine = GroupMachine.TestCase
