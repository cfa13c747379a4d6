"""Refusing an unknown topic (``mpbroker.clients.core.unknown_topics``, pure): the names suggested and
the message the tools print."""

from mpbroker.clients.core.unknown_topics import UnknownTopicError, close_matches, describe


def test_close_names_are_suggested_best_first_and_far_ones_not_at_all():
    known = ["page-views", "clicks", "page-view-errors", "orders"]
    assert close_matches("page-veiws", known)[0] == "page-views"
    assert close_matches("page-view", known)[0] == "page-views"
    assert close_matches("clickz", known) == ["clicks"]
    assert close_matches("zzz", known) == []
    assert close_matches("orders", known) == []  # the name itself is no suggestion
    assert describe("clickz", known) == "'clickz' (did you mean 'clicks'?)"
    assert describe("zzz", known) == "'zzz'"


def test_the_error_names_each_unknown_topic_where_it_was_looked_for_and_the_way_out():
    error = UnknownTopicError(["clickz", "zzz"], "not registered at zk:2181/mp", ["clicks", "orders"],
                              "--allow-missing-topics waits for it")
    assert isinstance(error, ValueError) and error.topics == ["clickz", "zzz"]
    assert str(error) == ("unknown topics 'clickz' (did you mean 'clicks'?), 'zzz': not registered at zk:2181/mp; "
                          "--allow-missing-topics waits for it")
    assert str(UnknownTopicError(["t"], "nowhere")) == "unknown topic 't': nowhere"
