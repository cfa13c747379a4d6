"""What the README walk runs commands in: a fresh copy of the repository (the files git
tracks, plus new ones not ignored, so the walk sees the working tree), a scratch HOME, the
copy's own ``.venv/bin`` first on PATH (the README's commands assume the venv is active
after the quick start), commands run by bash exactly as the README writes them.

``Walk.run`` runs one command to its end; ``Walk.background`` starts a long-running one
(a broker, a ZooKeeper) and stops its whole process group when the block is done."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fresh_copy(target: Path) -> Path:
    """The repository's files (tracked and untracked-but-not-ignored) copied under ``target``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in the working tree
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    return target


class Walk:
    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.clone = fresh_copy(root / "mpbroker")
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env["HOME"] = str(self.home)
        env["PATH"] = f"{self.clone / '.venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        self.env = env
        self._logs = root / "logs"
        self._logs.mkdir(exist_ok=True)

    def run(self, command: str, timeout: float = 120, expect: int | tuple = 0, input: str | None = None):
        """Run ``command`` with bash in the copy; its CompletedProcess. Fails on another exit code."""
        done = subprocess.run(["bash", "-c", command], cwd=self.clone, env=self.env, capture_output=True,
                              text=True, errors="replace", timeout=timeout, input=input)
        allowed = expect if isinstance(expect, tuple) else (expect,)
        assert done.returncode in allowed, (
            f"README command exited {done.returncode} (expected {allowed}):\n$ {command}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
        return done

    @contextlib.contextmanager
    def background(self, command: str, name: str):
        """Start ``command`` (bash, own process group); on leaving, TERM then KILL the group."""
        log_path = self._logs / f"{name}.log"
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.clone, env=self.env,
                                       stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield Background(process, log_path)
        finally:
            _stop_group(process)

    def wait_port(self, port: int, timeout: float = 60, background=None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if background is not None and background.process.poll() is not None:
                raise AssertionError(f"exited {background.process.returncode} before port {port} opened:\n"
                                     f"{background.output()}")
            with socket.socket() as probe:
                probe.settimeout(0.5)
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError(f"nothing listens on port {port} after {timeout} s"
                             + (f":\n{background.output()}" if background else ""))


class Background:
    def __init__(self, process, log_path: Path):
        self.process = process
        self.log_path = log_path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)


def _stop_group(process) -> None:
    if process.poll() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # anything it left behind
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)
