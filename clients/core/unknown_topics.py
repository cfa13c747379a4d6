"""Refusing a topic a user named that does not exist: ``UnknownTopicError`` names each
such topic and, when one is close, the known topic it was probably meant to be ("did
you mean"). A misspelled topic must not read as "nothing to do, all fine".

Free of I/O: each tool decides what "exists" means where it looks (registered in
ZooKeeper, counted by an audit event, ever written on a broker), which names it knows
to suggest, and which flag lets a user say that waiting for a topic is intended.
"""

import difflib


def close_matches(topic: str, known, limit: int = 3) -> list:
    """The known topic names most like ``topic`` (best first; none if none is close)."""
    return difflib.get_close_matches(topic, sorted(set(known) - {topic}), n=limit, cutoff=0.6)


def describe(topic: str, known) -> str:
    """``'page-veiws' (did you mean 'page-views'?)``, or just the quoted name."""
    matches = close_matches(topic, known)
    if not matches:
        return repr(topic)
    return f"{topic!r} (did you mean {' or '.join(map(repr, matches))}?)"


class UnknownTopicError(ValueError):
    """Topics that do not exist where the tool looked.

    ``where`` says where that was and why they count as unknown, e.g. "not registered
    at zk:2181/mpbroker"; ``hint`` how to proceed anyway (the tool's flag)."""

    def __init__(self, topics, where: str, known=(), hint: str = ""):
        self.topics = list(topics)
        self.known = sorted(set(known))
        names = ", ".join(describe(topic, self.known) for topic in self.topics)
        plural = "s" if len(self.topics) > 1 else ""
        message = f"unknown topic{plural} {names}: {where}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)
