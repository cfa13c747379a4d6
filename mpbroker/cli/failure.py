"""How a command-line tool reports an error it expected: one line on standard error.

Every tool of ``mpbroker.cli`` turns the exceptions it expects into the line
``<tool>: <message>`` and its exit code (each tool documents its codes);
``return fail(PROG, exc, EXIT_USAGE)`` in an ``except`` clause is that, in one line.
"""

import sys


def fail(prog: str, message, code: int) -> int:
    """Print ``<prog>: <message>`` on standard error and return ``code``."""
    print(f"{prog}: {message}", file=sys.stderr)
    return code
