"""Modern consumer groups (the classic group protocol a broker's ``kafka.port``
coordinates, commits in ``__consumer_offsets``) seen and changed from outside, as
``kafka-consumer-groups --bootstrap-server`` does: ``connection`` (an admin client and
its errors), ``report`` (list, describe, lag), ``targets`` (where a reset puts each
partition), ``changes`` (resets and deletes). The ZooKeeper groups of 0.7 clients are
``mpbroker.clients.groups``'."""
