"""What the supervisor (``mpbroker.supervisor``, which does the processes' lifecycle
only) keeps beside it, one concern per module: the checks before a start
(``preflight``), the listening sockets (``listeners``), the process slots
(``children``) and what each child runs (``child_mains``), when the broker counts as
ready (``readiness``), which settings a reload may change (``reload_policy``), the
control messages it only passes between the children and the replica roles and
cluster view it keeps for them (``relay``, ``role_book``), the status ``mpbroker-ctl``
shows (``status``) and profiling (``profiling``). gunicorn keeps ``sock.py`` and
``systemd.py`` beside its arbiter the same way."""
