"""The checks before a start: whatever can stop the broker from serving is found before
the first fork and reported as one ``StartupError`` line that says what and where (an
unusable or locked log.dir, too few file descriptors for the segment files, a machine
the shared-memory rings are not made for).

The log.dir lock (``flock`` on ``log.dir/.lock``, held by the supervisor for its life)
keeps a second broker from writing the same logs.
"""

import contextlib
import fcntl
import logging
import os
import platform
import resource

from mpbroker import descriptor_budget

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The broker cannot start; the message says why."""


@contextlib.contextmanager
def start_step(what: str):
    """A start-up step: an OSError in it becomes a StartupError starting with ``what``."""
    try:
        yield
    except OSError as exc:
        raise StartupError(f"{what}: {exc.strerror or exc}") from exc


def check_machine() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        raise StartupError(f"the shared-memory rings rely on x86-64 memory ordering; this is {platform.machine()}")


def raise_file_limit() -> None:
    """Take the hard limit of open files as the soft one (segment files, connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the file descriptor limit from %d to %d: %s", soft, hard, exc)


def check_file_limit(config) -> None:
    """Refuse to start when a worker could not open its segment files (descriptor_budget)."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return
    with start_step(f"cannot count the segment files under log.dir {config.log_dir}"):
        inherited = len(os.listdir("/proc/self/fd"))  # what every child starts with
        refusal, warning = descriptor_budget.check(config.log_dir, config.num_workers, config.max_connections,
                                                   limit, inherited)
    if refusal:
        raise StartupError(refusal)
    if warning:
        log.warning("%s", warning)


def open_log_dir(log_dir: str) -> int:
    """Create log.dir if needed, check that it is a writable directory, lock it; returns
    the locked file's descriptor (the lock lasts as long as it is open)."""
    try:
        os.makedirs(log_dir, 0o755, exist_ok=True)
    except FileExistsError:
        raise StartupError(f"log.dir {log_dir} is not a directory") from None
    except OSError as exc:
        raise StartupError(f"cannot create log.dir {log_dir}: {exc.strerror}") from exc
    if not os.path.isdir(log_dir):
        raise StartupError(f"log.dir {log_dir} is not a directory")
    with start_step(f"cannot check log.dir {log_dir}"):
        writable = os.access(log_dir, os.W_OK | os.X_OK)
        read_only = not writable and os.statvfs(log_dir).f_flag & os.ST_RDONLY
    if read_only:
        raise StartupError(f"log.dir {log_dir} is on a read-only file system")
    if not writable:
        raise StartupError(f"log.dir {log_dir} is not writable by this user (uid {os.geteuid()})")
    path = os.path.join(log_dir, ".lock")
    with start_step(f"cannot open the lock file of log.dir {path}"):
        lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise StartupError(f"another broker is using log.dir {log_dir}") from None
    except OSError as exc:
        os.close(lock_fd)
        raise StartupError(f"cannot lock log.dir {path}: {exc.strerror}") from exc
    return lock_fd
