"""What a freshly forked child does first, before its own code runs: die with the
parent, forget the supervisor's signal setup, take a process name that ``ps`` and
``top`` show. ``prctl`` through ctypes: the standard library has no binding for it."""

import ctypes
import ctypes.util
import os
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def die_with_parent(expected_parent: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits; exit now if
    the parent is already gone (it died before we could ask)."""
    if _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != expected_parent:
        os._exit(1)


def set_process_name(name: str) -> None:
    """The kernel's short name of this process (15 bytes), as ``ps -o comm`` shows."""
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def reset_signals() -> None:
    """Forget the supervisor's signal setup: default handlers, no wake-up fd."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
