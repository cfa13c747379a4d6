"""``mpbroker-console-consumer``: print a topic's messages, one per line.

    mpbroker-console-consumer --broker-list HOST:PORT[,..] --topic T [--partition P]
        [--from-beginning | --offset N | --offset-by-time TIME] [--max-messages N]
        [--timeout-ms N] [--wait-for-topic] [--fetch-size N] [--max-fetch-size N]
        [--print-partition] [--print-offset] [--print-timestamp] [--print-headers] [--print-key]
        [--strip-envelopes [--print-envelope]]

    mpbroker-console-consumer --zookeeper ZK [--group G]
        (--topic T | --whitelist REGEX | --blacklist REGEX) [--wait-for-topic]
        [--from-beginning] [--max-messages N] [--timeout-ms N] [--zk-timeout-ms N]
        [--print-partition] [--print-offset] [--print-timestamp] [--print-headers] [--print-key]
        [--strip-envelopes [--print-envelope]]

With ``--broker-list`` (alias ``--bootstrap-server``): reads every partition of the
topic on every listed broker (or partition P of each) from the latest offset, the
earliest (``--from-beginning``), ``--offset N`` or ``--offset-by-time TIME`` (the
segment base OFFSETS gives for that time: ``mpbroker.clients.consumer.offset_times``), with one
MULTIFETCH per broker and round. ``--print-partition`` prints ``<partition>``
(``<broker>-<partition>`` when several brokers are listed). An ``--offset`` outside
the log, or inside a message (offsets are byte positions: only the offsets printed by
``--print-offset``, the log's start and end and segment bases start a message), is an
error naming the log's ends or the nearest earlier message start. A topic no listed
broker has a log of is an error unless ``--wait-for-topic``; an existing topic without
messages is waited for. A message larger than the fetch size is fetched again with a
larger one, up to ``--max-fetch-size``. When retention deletes the segment being read,
reading restarts at the earliest offset, with a warning.

With ``--zookeeper HOST:PORT[,..][/chroot]`` (``zk.connect``): consumes as a member of
the consumer group ``--group`` (default: a new ``console-consumer-<n>``, removed from
ZooKeeper again on exit, as 0.7 did) through the ZooKeeper consumer connector, with
one stream over the topic, or over every topic a ``--whitelist``/``--blacklist``
regular expression takes (now and later). A ``--topic`` no broker registered is an
error (with the registered topics that look like it) unless ``--wait-for-topic``. The
group's partitions are shared with its other members; each starts at the group's
committed offset, or without one at the latest offset (the earliest with
``--from-beginning``: ``autooffset.reset``). ``--print-partition`` prints
``<broker>-<partition>`` (a replicated topic's: ``<partition>``, read from its current
leader). On exit -- ``--max-messages``, ``--timeout-ms``, SIGINT or
SIGTERM -- the offsets of everything printed are committed, so a rerun with the same
group goes on where this one stopped.

A topic written by modern producers (record batches) prints each record's value;
``--print-timestamp``, ``--print-headers`` and ``--print-key`` add its timestamp, headers
and key (``console_consumer_output``). Its offsets are byte positions too (a batch at
[p, q) with n records holds q-n .. q-1): ``--print-offset`` prints a record's offset and
offset + 1, and ``--offset`` takes either.

``--strip-envelopes`` prints the payloads inside producers' audit envelopes
(``mpbroker.clients.core.envelope``; other payloads as they are); ``--print-envelope`` adds
``<created ms> <host>/<client>\\t`` (``-\\t`` for a message without one).

Output: the payload, preceded by the partition and ``\\t`` with
``--print-partition`` and by ``offset=<offset> next_offset=<next offset>\\t`` with
``--print-offset``: where the message starts (``--offset`` with it prints it again;
the messages of a compressed set share its start) and where the next one starts (what
a consumer commits). Stops after ``--max-messages``, or once ``--timeout-ms`` passed
without a new message. Messages are fetchable once the broker flushed them
(``log.flush.interval`` messages or ``log.default.flush.interval.ms``).

Exit codes: 0 done (also after SIGINT/SIGTERM with ``--zookeeper``); 1 an error while
reading (a damaged message, after the valid ones before it; a message larger than
``--max-fetch-size``); 2 bad arguments or input (an offset outside the log or inside a
message, an unknown topic or partition); 3 no broker could be reached
(``--broker-list``) or no ZooKeeper server answered within ``--zk-timeout-ms``
(``--zookeeper``). Errors are one line on standard error.

This module is the entry point: it checks the options and hands over to the mode;
``console_consumer_args`` owns the options and exit codes, ``console_consumer_brokers``
the ``--broker-list`` mode, ``console_consumer_group`` the ``--zookeeper`` mode and
``console_consumer_output`` the prefixes printed before a payload.
"""

import sys

from mpbroker.cli.console_consumer_args import EXIT_USAGE, PROG, check_arguments, parser
from mpbroker.cli.console_consumer_brokers import consume_from_brokers
from mpbroker.cli.console_consumer_group import consume_as_group
from mpbroker.cli.failure import fail
from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.codec.errors import InvalidTopicError


def main(argv=None, stdout=None) -> int:
    args = parser().parse_args(argv)
    out = stdout or sys.stdout.buffer
    try:
        check_arguments(args)
        brokers = None if args.zookeeper is not None else parse_broker_list(args.broker_list)
    except (ValueError, InvalidTopicError) as exc:
        return fail(PROG, exc, EXIT_USAGE)
    if args.zookeeper is not None:
        return consume_as_group(args, out)
    return consume_from_brokers(args, brokers, out)


if __name__ == "__main__":
    sys.exit(main())
