"""A server process of a peer broker, private to one benchmark: started in its own
session with its output in a file, waited for until its port accepts connections, and
stopped afterwards, gracefully first, then by killing its process group. It dies with
the benchmark too (parent-death signal), so a killed benchmark leaves nothing behind."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

_PR_SET_PDEATHSIG = 1


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark process goes away."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class LocalServer:
    """Subclasses set ``name`` and implement ``command()`` (argv, env); ``port`` is the
    client port to wait for. The data lives in ``self.directory`` (removed at the end)."""

    name = "server"
    start_timeout = 90.0

    def __init__(self, base_dir: str | None = None):
        self.directory = tempfile.mkdtemp(prefix=f"{self.name}-bench-", dir=base_dir)
        self.port = free_loopback_port()
        self.output_path = os.path.join(self.directory, "server.out")
        self.processes = []  # everything started, in start order; stopped in reverse

    def command(self) -> tuple:
        raise NotImplementedError

    def spawn(self, argv: list, env: dict | None = None) -> subprocess.Popen:
        with open(self.output_path, "ab") as output:
            process = subprocess.Popen(argv, env=env, cwd=self.directory, stdin=subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent)
        self.processes.append(process)
        return process

    def start(self) -> "LocalServer":
        argv, env = self.command()
        server = self.spawn(argv, env)
        deadline = time.monotonic() + self.start_timeout
        while not accepts(self.port):
            if server.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {server.returncode}:\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not accept on port {self.port} in {self.start_timeout:.0f}s:\n"
                                   f"{self.output()[-4000:]}")
            time.sleep(0.2)
        return self

    def output(self) -> str:
        try:
            with open(self.output_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """TERM to each process (newest first), then KILL to any process group left."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # helpers it started in its session
            except (ProcessLookupError, PermissionError):
                pass
            if process.poll() is None:
                process.wait(10)

    def __enter__(self) -> "LocalServer":
        try:
            return self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, *_) -> None:
        try:
            self.stop()
        finally:
            if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
                print(f"--- the last lines of {self.name}'s output ---\n" + "\n".join(self.output().splitlines()[-40:]),
                      file=sys.stderr)
            shutil.rmtree(self.directory, ignore_errors=True)
