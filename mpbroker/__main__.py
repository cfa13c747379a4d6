"""``python -m mpbroker serve CONFIG``: the same as the ``mpbroker`` command."""

import sys

from mpbroker.cli.broker import main

sys.exit(main())
