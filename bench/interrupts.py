"""TERM and HUP end a benchmark like Ctrl-C does (KeyboardInterrupt), so that the
``with`` blocks around its brokers stop them and remove their data on the way out."""

import signal


def stop_on_signals() -> None:
    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)
