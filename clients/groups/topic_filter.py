"""Topic filters for ``create_message_streams_by_filter``: Whitelist and Blacklist.

A filter is a regular expression matched against the whole topic name (``,`` means
``|``, as in 0.7). A whitelist takes the topics it matches, a blacklist the others.
Registered in the group as ``*<streams>*<regex>`` or ``!<streams>!<regex>``.
"""

import re

from mpbroker.registry.layout import Subscription, topic_matches


class TopicFilter:
    whitelist = True

    def __init__(self, pattern: str):
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("a topic filter needs a non-empty regular expression")
        try:
            re.compile(pattern.replace(",", "|"))
        except re.error as exc:
            raise ValueError(f"bad topic filter {pattern!r}: {exc}") from None
        self.pattern = pattern

    def matches(self, topic: str) -> bool:
        return topic_matches(self.pattern, self.whitelist, topic)

    def subscription(self, streams: int) -> Subscription:
        return Subscription({}, self.pattern, self.whitelist, streams)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pattern!r})"


class Whitelist(TopicFilter):
    whitelist = True


class Blacklist(TopicFilter):
    whitelist = False
