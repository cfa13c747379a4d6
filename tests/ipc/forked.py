"""Helpers for the ipc tests: run a function in a forked child and collect its result with a timeout."""

import os
import pickle
import signal
import time
import traceback


class Child:
    """A forked child running ``fn()``; its return value comes back pickled through a pipe."""

    def __init__(self, fn):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never return into pytest
            code = 0
            try:
                os.close(read_fd)
                try:
                    payload = pickle.dumps(("ok", fn()))
                except BaseException:  # noqa: BLE001 - report anything to the parent
                    payload = pickle.dumps(("error", traceback.format_exc()))
                    code = 1
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
            except BaseException:  # noqa: BLE001
                code = 2
            finally:
                os._exit(code)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.pid = pid
        self._read_fd = read_fd
        self._received = bytearray()
        self.status = None

    def _collect(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._received += chunk

    def alive(self) -> bool:
        if self.status is not None:
            return False
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return True
        self.status = status
        return False

    def kill(self) -> None:
        """Make sure the child is gone (for ``finally`` blocks); harmless after ``result``."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            _, self.status = os.waitpid(self.pid, 0)
        self._close()

    def _close(self) -> None:
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None

    def result(self, timeout: float):
        """Wait for the child (killing it after ``timeout`` s) and return what ``fn`` returned."""
        deadline = time.monotonic() + timeout
        while self.alive():
            self._collect()  # a big result must not block the child on a full pipe
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"child {self.pid} did not finish within {timeout} s (killed)")
            time.sleep(0.005)
        self._collect()
        self._close()
        raw = bytes(self._received)
        if not raw:
            raise AssertionError(f"child {self.pid} died without a result (wait status {self.status})")
        kind, value = pickle.loads(raw)
        if kind != "ok":
            raise AssertionError(f"child {self.pid} failed:\n{value}")
        assert os.waitstatus_to_exitcode(self.status) == 0
        return value
