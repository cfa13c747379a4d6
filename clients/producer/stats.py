"""The producer's counters (``Producer.stats``): messages, bytes and requests sent,
retries, failures and drops. Apart so that every part of the producer that counts (the
send's short way, the delivery, the async sender, the write-behind queues' failures)
counts into one object without knowing the others."""


class ProducerStats:
    """Counters of a producer. Each has one writer at a time (the thread holding the
    send lock, or the async sender thread; callers only add drops), so no lock.
    Fire-and-forget messages count as sent once handed to their connection (a sync
    producer's write-behind queue); one that then could not be written counts as failed
    as well."""

    def __init__(self):
        self.messages_sent = 0
        self.bytes_sent = 0
        self.requests_sent = 0
        self.retries = 0
        self.messages_failed = 0
        self.messages_dropped = 0  # async queue full

    def as_dict(self) -> dict:
        return dict(vars(self))

    def count_sent(self, requests) -> None:
        """Count ``requests`` (``produce_requests.ProduceRequest``) as sent."""
        self.requests_sent += len(requests)
        for request in requests:
            self.messages_sent += len(request.payloads)
            self.bytes_sent += len(request.message_set)
