"""RoleBook: the supervisor's copy of the registrar's replica roles."""

from mpbroker.supervision.role_book import RoleBook


def test_the_first_topics_go_to_the_acceptor_even_when_there_are_none():
    # The acceptor serves no partition with leader epochs on disk until it has had the
    # registrar's first topics: an empty first map must reach it too.
    book = RoleBook(2)
    assert not book.known
    changed, _ = book.apply({"topics": {}, "partitions": [], "seq": 1})
    assert changed and book.known and book.topics == {}
    changed, _ = book.apply({"topics": {}, "partitions": [], "seq": 2})
    assert not changed
    changed, _ = book.apply({"topics": {"t": 2}, "seq": 3})
    assert changed and book.topics == {"t": 2}


def test_roles_go_to_the_worker_owning_each_partition():
    book = RoleBook(2)
    entries = [{"topic": "t", "partition": p, "role": "follower"} for p in range(4)]
    _, by_slot = book.apply({"topics": {"t": 4}, "partitions": entries, "seq": 1})
    assert sorted(e["partition"] for slot in by_slot.values() for e in slot) == [0, 1, 2, 3]
    for slot, slot_entries in by_slot.items():
        assert all(book.owner(e["topic"], e["partition"]) == slot for e in slot_entries)
    book.apply({"partitions": [{"topic": "t", "partition": 0, "role": "none"}]})
    assert ("t", 0) not in book.partitions
