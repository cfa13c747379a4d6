"""The processes the supervisor forks, from the child's side: what a fresh fork does
first (``fork``), and the skeleton each child runs on (``child.ChildProcess``, with its
``timers``). The supervisor itself makes and watches them (``mpbroker.supervisor``)."""
