"""The group APIs of the modern listener: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, ListGroups, DescribeGroups and DeleteGroups.

The requests are decoded here and handed to the group coordinator
(``mpbroker.group_coordinator``, sans-IO: the state machine of the classic group
protocol); this module is the I/O around it. A JoinGroup or SyncGroup may be answered
later (when the rebalance completes, or a timeout decides it): its connection reserves
its answer's place, and the coordinator's reply fills it. Every request for a group
first asks ``offsets_topic.status``: this broker must lead the group's partition of
``__consumer_offsets`` and have loaded it (else NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS, which send clients back to FindCoordinator or to a retry).
"""

import logging

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from mpbroker.acceptor.kafka.answers import fill, respond
from mpbroker.clock import monotonic_ms
from mpbroker.group_coordinator import JoinRequest, JoinResult, SyncResult
from mpbroker.group_coordinator import records as offset_records
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

log = logging.getLogger(__name__)

GROUP_KEY = 0  # FindCoordinator key types
_JoinMember = JoinGroupResponse.JoinGroupResponseMember
_LeftMember = LeaveGroupResponse.MemberResponse
_Described = DescribeGroupsResponse.DescribedGroup
_DescribedMember = DescribeGroupsResponse.DescribedGroup.DescribedGroupMember
_Listed = ListGroupsResponse.ListedGroup
_Deleted = DeleteGroupsResponse.DeletableGroupResult


def client_host(connection) -> str:
    peer = connection.peer
    return f"/{peer[0]}" if isinstance(peer, tuple) and peer else str(peer)


class GroupHandlers:
    def __init__(self, config, offsets_topic, coordinator, to_send):
        self.config = config
        self._topic = offsets_topic
        self._coordinator = coordinator
        self._to_send = to_send  # callable(connection): a reserved answer was filled

    def _later(self, connection, request_header, api_key: int, make_answer):
        """A reply callback that fills a reserved answer: ``make_answer(result)`` gives
        the response object."""
        response = connection.reserve()
        version = request_header.api_version
        correlation_id = request_header.correlation_id

        def reply(result) -> None:
            fill(response, correlation_id, api_key, version, make_answer(result))
            if not connection.closed:
                self._to_send(connection)
        return reply

    # --- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, connection, request_header, request) -> None:
        version = request_header.api_version
        key_type = request.key_type if version >= 1 else GROUP_KEY
        if key_type != GROUP_KEY:
            error, node, host, port = KafkaError.COORDINATOR_NOT_AVAILABLE, -1, "", -1
            message = "transactions are not supported here"
        else:  # (the empty group id is a group too, as in Kafka: OffsetCommit and OffsetFetch take it)
            error, node, host, port = self._topic.coordinator(request.key or "")
            message = None
        respond(connection, request_header.correlation_id, ApiKey.FIND_COORDINATOR, version,
                FindCoordinatorResponse[version](throttle_time_ms=0, error_code=error, error_message=message,
                                                 node_id=node, host=host, port=port))

    # --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------

    def join_group(self, connection, request_header, request) -> None:
        version = request_header.api_version

        def answer(result):
            return JoinGroupResponse[version](
                throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
                protocol_type=result.protocol_type, protocol_name=result.protocol_name or "",
                leader=result.leader, member_id=result.member_id,
                members=[_JoinMember(member_id=member.member_id, group_instance_id=member.group_instance_id,
                                     metadata=member.metadata) for member in result.members])
        reply = self._later(connection, request_header, ApiKey.JOIN_GROUP, answer)
        error = self._status(request.group_id)
        if error:
            reply(JoinResult(error, -1, None, None, "", request.member_id, []))
            return
        self._coordinator.join(monotonic_ms(), JoinRequest(
            group_id=request.group_id, member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=request_header.client_id or "", client_host=client_host(connection),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple((protocol.name, bytes(protocol.metadata)) for protocol in request.protocols),
            require_known_member_id=version >= 4, reason=None), reply)

    def sync_group(self, connection, request_header, request) -> None:
        version = request_header.api_version

        def answer(result):
            return SyncGroupResponse[version](throttle_time_ms=0, error_code=result.error,
                                              protocol_type=result.protocol_type,
                                              protocol_name=result.protocol_name, assignment=result.assignment)
        reply = self._later(connection, request_header, ApiKey.SYNC_GROUP, answer)
        error = self._status(request.group_id)
        if error:  # (a load under way: a rejoin, as Kafka answers a SyncGroup then)
            reply(SyncResult(KafkaError.REBALANCE_IN_PROGRESS if error == KafkaError.COORDINATOR_LOAD_IN_PROGRESS
                             else error, None, None, b""))
            return
        assignments = {entry.member_id: bytes(entry.assignment) for entry in request.assignments}
        self._coordinator.sync(monotonic_ms(), request.group_id, request.generation_id, request.member_id,
                               request.group_instance_id if version >= 3 else None,
                               request.protocol_type if version >= 5 else None,
                               request.protocol_name if version >= 5 else None, assignments, reply)

    def heartbeat(self, connection, request_header, request) -> None:
        version = request_header.api_version
        error = self._status(request.group_id) or self._coordinator.heartbeat(
            monotonic_ms(), request.group_id, request.generation_id, request.member_id,
            request.group_instance_id if version >= 3 else None)
        respond(connection, request_header.correlation_id, ApiKey.HEARTBEAT, version,
                HeartbeatResponse[version](throttle_time_ms=0, error_code=error))

    def leave_group(self, connection, request_header, request) -> None:
        version = request_header.api_version
        if version >= 3:
            leaving = [(member.member_id, member.group_instance_id) for member in request.members]
        else:
            leaving = [(request.member_id, None)]
        error = self._status(request.group_id)
        if error:
            members = [(member_id, instance, error) for member_id, instance in leaving]
        else:
            error, members = self._coordinator.leave(monotonic_ms(), request.group_id, leaving)
        if version < 3 and not error and members:  # one error code: the member's
            error = members[0][2]
        respond(connection, request_header.correlation_id, ApiKey.LEAVE_GROUP, version,
                LeaveGroupResponse[version](
                    throttle_time_ms=0, error_code=error,
                    members=[_LeftMember(member_id=member_id, group_instance_id=instance, error_code=member_error)
                             for member_id, instance, member_error in members]))

    # --- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------

    def list_groups(self, connection, request_header, request) -> None:
        version = request_header.api_version
        self._topic.ensure()
        listed = [group for group in self._coordinator.list_groups()
                  if self._topic.status(group.group_id) == KafkaError.NONE]
        respond(connection, request_header.correlation_id, ApiKey.LIST_GROUPS, version,
                ListGroupsResponse[version](throttle_time_ms=0, error_code=KafkaError.NONE, groups=[
                    _Listed(group_id=group.group_id, protocol_type=group.protocol_type, group_state=group.state,
                            group_type="classic") for group in listed]))

    def describe_groups(self, connection, request_header, request) -> None:
        version = request_header.api_version
        described = []
        for group_id in request.groups:
            error = self._status(group_id)
            if error:
                described.append(_Described(error_code=error, group_id=group_id, group_state="", protocol_type="",
                                            protocol_data="", members=[], authorized_operations=None))
                continue
            group = self._coordinator.describe(group_id)
            described.append(_Described(
                error_code=group.error, group_id=group_id, group_state=group.state,
                protocol_type=group.protocol_type or "", protocol_data=group.protocol_name or "",
                authorized_operations=None,
                members=[_DescribedMember(member_id=member.member_id, group_instance_id=member.group_instance_id,
                                          client_id=member.client_id, client_host=member.client_host,
                                          member_metadata=member.metadata, member_assignment=member.assignment)
                         for member in group.members]))
        respond(connection, request_header.correlation_id, ApiKey.DESCRIBE_GROUPS, version,
                DescribeGroupsResponse[version](throttle_time_ms=0, groups=described))

    def delete_groups(self, connection, request_header, request) -> None:
        """Each group is checked and forgotten, its tombstone written; the answer waits
        for every tombstone to be durable (a restart must not bring a deleted group's
        commits back)."""
        version = request_header.api_version
        results = {}
        pending = []
        for group_id in dict.fromkeys(request.groups_names):
            error = self._status(group_id)
            committed = {} if error else self._coordinator.committed(group_id, None)
            error = error or self._coordinator.delete(group_id)
            results[group_id] = error
            if not error:  # a tombstone per offset, then the group's (Kafka's way: compaction-ready)
                pending.append((group_id, [*(offset_records.offset_tombstone(group_id, topic, partition)
                                             for topic, partition in committed),
                                           offset_records.group_tombstone(group_id)]))

        def answer(final):
            return DeleteGroupsResponse[version](throttle_time_ms=0, results=[
                _Deleted(group_id=group_id, error_code=error) for group_id, error in final.items()])
        reply = self._later(connection, request_header, ApiKey.DELETE_GROUPS, answer)
        if not pending:
            reply(results)
            return
        outstanding = [len(pending)]

        def written(group_id, error):
            if error:
                results[group_id] = error
            outstanding[0] -= 1
            if outstanding[0] == 0:
                reply(results)
        for group_id, tombstones in pending:
            self._topic.write(connection, group_id, tombstones,
                              lambda error, group_id=group_id: written(group_id, error))

    def _status(self, group_id) -> int:
        """The coordinator's own answer for a request about ``group_id`` (NONE: go on).
        An empty id is the coordinator's to refuse (the membership APIs) or take (the
        others, as Kafka does)."""
        return self._topic.status(group_id or "")
