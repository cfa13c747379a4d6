"""One consumer group's state (Kafka's GroupMetadata and MemberMetadata): its members,
the static members' instance ids, the members asked to come back with an id, the
protocols every member supports, the generation, the leader and the committed offsets.

Only bookkeeping that keeps these consistent lives here (adding, removing, replacing a
member; the protocol vote; the leader); what happens when (rebalances, timeouts,
answers) is ``rebalance``'s and ``membership``'s."""

from collections import Counter

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


class Member:
    """One member. ``join_reply``/``sync_reply`` are set while its JoinGroup/SyncGroup
    waits (Kafka's awaiting callbacks); ``expires_at`` is its session deadline and
    ``heap_at`` the time of its earliest live entry in the deadline heap."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "session_timeout_ms",
                 "rebalance_timeout_ms", "protocol_type", "protocols", "assignment", "join_reply", "sync_reply",
                 "is_new", "expires_at", "heap_at")

    def __init__(self, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                 rebalance_timeout_ms, protocol_type, protocols):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        self.assignment = b""
        self.join_reply = None
        self.sync_reply = None
        self.is_new = False
        self.expires_at = None
        self.heap_at = None

    def protocol_names(self):
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def matches(self, protocols) -> bool:
        """The same protocols, in the same order, with the same metadata."""
        return self.protocols == tuple((name, bytes(metadata)) for name, metadata in protocols)

    def vote(self, candidates) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError("a member supports none of the group's common protocols")

    def awaiting(self) -> bool:
        return self.join_reply is not None or self.sync_reply is not None


class Group:
    """One group. ``members`` keeps join order (the first is the leader when one must
    be chosen); ``pending`` maps member ids handed out with MEMBER_ID_REQUIRED to the
    token of their expiry; ``offsets`` maps (topic, partition) to OffsetAndMetadata."""

    __slots__ = ("group_id", "state", "generation_id", "protocol_type", "protocol_name", "leader_id", "members",
                 "static_members", "pending", "pending_sync", "protocol_counts", "awaiting_join",
                 "new_member_added", "join_timer", "initial_delay", "sync_timer", "offsets")

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = EMPTY
        self.generation_id = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader_id = None
        self.members = {}
        self.static_members = {}
        self.pending = {}
        self.pending_sync = set()
        self.protocol_counts = Counter()
        self.awaiting_join = 0
        self.new_member_added = False
        self.join_timer = None  # the token of the live join deadline (None: none)
        self.initial_delay = None  # (delay, remaining) while the join deadline is the initial delay
        self.sync_timer = None  # the token of the live pending-sync deadline
        self.offsets = {}

    # --- the protocols

    def supports_protocols(self, protocol_type: str, names) -> bool:
        """Kafka's check: any type and protocols join an Empty group; otherwise the type
        must be the group's and one of the names one that every member supports."""
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        return (self.protocol_type == protocol_type
                and any(self.protocol_counts[name] == len(self.members) for name in names))

    def candidate_protocols(self) -> set:
        count = len(self.members)
        return {name for name, supporters in self.protocol_counts.items() if supporters == count}

    def select_protocol(self) -> str:
        """The protocol most members prefer among those all support (a tie goes to the
        one voted for first, members in join order)."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return votes.most_common(1)[0][0]

    # --- the members

    def add(self, member: Member, join_reply) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.protocol_counts.update(set(member.protocol_names()))
        self.set_join_reply(member, join_reply)
        self.pending.pop(member.member_id, None)

    def remove(self, member_id: str):
        """The member (or None); its static id, pending marks and vote go with it. Its
        waiting replies are the caller's to answer first."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self.protocol_counts.subtract(set(member.protocol_names()))
            self.protocol_counts += Counter()  # drop the zero counts
            if member.join_reply is not None:
                self.awaiting_join -= 1
            if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def update_protocols(self, member: Member, protocols, rebalance_timeout_ms, session_timeout_ms) -> None:
        self.protocol_counts.subtract(set(member.protocol_names()))
        member.protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        self.protocol_counts.update(set(member.protocol_names()))
        self.protocol_counts += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def replace_static(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """The static member ``instance_id`` under a new member id (same object, same
        assignment). Its waiting replies are the caller's to answer first."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        self.static_members[instance_id] = new_member_id
        return member

    def set_join_reply(self, member: Member, reply) -> None:
        if (member.join_reply is None) != (reply is None):
            self.awaiting_join += 1 if reply is not None else -1
        member.join_reply = reply

    def take_join_reply(self, member: Member):
        reply = member.join_reply
        self.set_join_reply(member, None)
        return reply

    def take_sync_reply(self, member: Member):
        reply, member.sync_reply = member.sync_reply, None
        return reply

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join and not self.pending

    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else the first member that did; False if none did."""
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.join_reply is not None:
            return True
        for member_id, member in self.members.items():
            if member.join_reply is not None:
                self.leader_id = member_id
                return True
        return False

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.state = COMPLETING_REBALANCE
        else:
            self.protocol_name = None
            self.state = EMPTY
        self.pending_sync.clear()

    def static_member_fenced(self, instance_id, member_id) -> bool:
        """Kafka's validateCurrentMember for a static member: FENCED when the instance
        id is known under another member id."""
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id
