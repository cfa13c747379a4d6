"""The threads of a workload: started by name, their own failures kept, joined at the end.

Owns only that, for ``workload`` and ``modern_workload``: a thread that raises (a bug
of the workload itself, not a failed request, which the history records) has its
exception kept in ``errors`` for the run to report, and ``join`` says which threads
did not end in time.
"""

import threading


class WorkloadThreads:
    def __init__(self):
        self._threads = []
        self.errors = []  # unexpected exceptions of the threads themselves (bugs), not of requests

    def spawn(self, name: str, target, *args) -> None:
        def run():
            try:
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - kept for the run to report
                self.errors.append(f"{name}: {exc!r}")
                raise

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def join(self, timeout: float) -> list:
        """Wait up to ``timeout`` for each thread; the names of those still running."""
        for thread in self._threads:
            thread.join(timeout)
        alive = [thread.name for thread in self._threads if thread.is_alive()]
        self._threads.clear()
        return alive
