"""Small helpers a forked child runs first: die with the parent, a clean signal
state, its own signal handling, a process name that ``ps`` and ``top`` show."""

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


def install_child_signals() -> int:
    """The signal handling of a broker child: TERM asks for a graceful stop through the
    returned wake-up fd (the event loop reads it with ``term_requested``); INT and QUIT
    exit at once; HUP is ignored (the supervisor hands reloads out itself), so is PIPE."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(0))
    signal.signal(signal.SIGQUIT, lambda signum, frame: os._exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return read_fd


def term_requested(wakeup_fd: int) -> bool:
    """Drain the wake-up fd; True if a TERM arrived."""
    try:
        signals = os.read(wakeup_fd, 512)
    except BlockingIOError:
        return False
    return signal.SIGTERM in signals
