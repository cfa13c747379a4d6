"""Logging for every broker process: one line per event on stderr (journald picks it
up), tagged with the process role (supervisor, acceptor, worker N) and pid."""

import logging
import sys

_role = "mpbroker"


class _RoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.role = _role
        return True


def configure_logging(level: str = "INFO", role: str = "supervisor") -> None:
    set_role(role)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RoleFilter())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(role)s[%(process)d] %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())


def set_role(role: str) -> None:
    """Name this process in every log line from now on (called after fork)."""
    global _role
    _role = role


def set_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())
