"""Shared pieces of the benchmarks: machine description, best-of timing, table
printing, result files under ``bench/results/``, and the raw client ``Connection``
the broker benchmarks send frames on."""

import datetime
import json
import os
import platform
import socket
import sys
import time

from mpbroker.codec.framing import FrameReader

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def machine() -> dict:
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def best_of(repeats: int, run):
    """Run ``run()`` ``repeats`` times; return the shortest wall time in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def print_table(title: str, headers: list, rows: list) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    lines = [title, ""]
    lines.append("| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    text = "\n".join(lines)
    print(text)
    return text


def command_line() -> str:
    """The command as a user types it: ``python -m bench.<module> ...`` for a bench run as
    a module (``sys.argv[0]`` is then the module's file path, a path of this machine)."""
    program, *arguments = sys.argv
    module = os.path.splitext(os.path.basename(program))[0]
    if os.path.basename(os.path.dirname(os.path.abspath(program))) == "bench" and program.endswith(".py"):
        program = f"python -m bench.{module}"
    return " ".join([program, *arguments])


def write_results(name: str, table: str, data: dict, directory: str = RESULTS_DIR) -> str:
    """``<directory>/<name>.json`` (``data`` with the machine, the command and the time)
    and ``<name>.md`` (the table); returns the JSON's path."""
    os.makedirs(directory, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"benchmark": name, "when": stamp, "machine": machine(), "command": command_line(), **data}
    json_path = os.path.join(directory, f"{name}.json")
    with open(json_path, "w") as f:
        json.dump(record, f, indent=2)
    with open(os.path.join(directory, f"{name}.md"), "w") as f:
        f.write(f"{table}\n\nMachine: {record['machine']}\nCommand: `{record['command']}`\nWhen: {stamp}\n")
    print(f"\nresults written to {json_path}")
    return json_path


class Connection:
    """One client connection to a broker (``TCP_NODELAY``), reading whole answer frames;
    ``timeout`` bounds each socket call (None: block, as a plain client does)."""

    def __init__(self, port: int, timeout: float | None = None, host: str = "127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader(1 << 30)

    def receive(self) -> bytes:
        while True:
            frame = self.reader.next_frame()
            if frame is not None:
                return frame
            view = self.reader.receive_buffer()
            count = self.sock.recv_into(view)
            del view
            if not count:
                raise ConnectionError("broker closed the connection")
            self.reader.commit(count)

    def close(self) -> None:
        self.sock.close()
