"""``mpbroker-ctl``: talk to a running broker over its control socket.

    mpbroker-ctl -c CONFIG status [--json]
    mpbroker-ctl -c CONFIG shutdown [--timeout S]
    mpbroker-ctl -c CONFIG reload
    mpbroker-ctl -c CONFIG groups [--group G] [--json]

``groups`` reads the consumer groups from the ZooKeeper of the configuration's
``zk.connect`` (it does not need the broker running) and prints what
``mpbroker-groups`` prints: the groups, or one group's owners, offsets and lag.

Exit codes: 0 done; 1 the broker refused or failed the command (or did not stop in
time; for ``groups``: no such group); 2 bad arguments or configuration; 3 no broker
answers on the socket (for ``groups``: no ZooKeeper server answered).
"""

import argparse
import json
import os
import socket
import sys
import time

from mpbroker.config import ConfigError, control_socket_from_file, value_from_file

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3


class NotRunning(Exception):
    pass


def call(path: str, command: str, timeout: float = 10.0) -> dict:
    """Send one command to the control socket at ``path``; return the answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except FileNotFoundError:
        raise NotRunning(f"no broker is running: {path} does not exist") from None
    except ConnectionRefusedError:
        raise NotRunning(f"no broker is running: nothing answers on {path} (stale socket)") from None
    except PermissionError:
        raise NotRunning(f"permission denied on {path}: run as the broker's user") from None
    with sock:
        sock.sendall(json.dumps({"command": command}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    if not data:
        raise NotRunning(f"the broker closed {path} without answering")
    return json.loads(data)


def _table(headers, rows) -> str:
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _process_state(process: dict) -> str:
    """The state column: the slot's state, and when a respawn is scheduled, how soon."""
    respawn_in = process.get("respawn_in_s")
    if respawn_in is None:
        return process["state"]
    return f"{process['state']}, respawn in {respawn_in}s" if respawn_in > 0 else f"{process['state']}, respawning"


def format_status(status: dict) -> str:
    out = [f"broker {status['brokerid']}  pid {status['pid']}  port {status['port']}  "
           f"{status['phase']}  up {status['uptime_s']}s  log.dir {status['log_dir']}", ""]
    processes = [[f"worker {w['slot']}", w["pid"] or "-", _process_state(w), w["restarts"], w["uptime_s"],
                  w["partitions"]] for w in status["workers"]]
    acceptor = status["acceptor"]
    processes.append(["acceptor", acceptor["pid"] or "-", _process_state(acceptor), acceptor["restarts"],
                      acceptor["uptime_s"], "-"])
    for role in ("registrar", "metrics"):
        child = status.get(role)
        if child:
            processes.append([role, child["pid"] or "-", _process_state(child), child["restarts"],
                              child["uptime_s"], "-"])
    registrar = status.get("registrar")
    out.append(_table(["process", "pid", "state", "restarts", "uptime_s", "partitions"], processes))
    out.append("")
    zookeeper = status.get("zookeeper")
    if registrar:
        if zookeeper:
            out.append(f"zookeeper {zookeeper['zk_connect']}: {zookeeper['state']}, "
                       f"{'registered' if zookeeper['registered'] else 'not registered'}, "
                       f"{zookeeper['topics']} topics")
        else:
            out.append("zookeeper: no report from the registrar yet")
        out.append("")
    metrics = status.get("metrics")
    if metrics:
        out.append(f"metrics: http://{metrics['host'] or '0.0.0.0'}:{metrics['port']}/metrics")
        out.append("")
    if status["partitions"]:
        out.append(_table(
            ["topic", "partition", "worker", "log_end", "flushed_end", "segments", "bytes", "msg/s"],
            [[p["topic"], p["partition"], p["worker"], p["log_end"], p["flushed_end"], p["segments"],
              p["bytes"], p["messages_per_s"]] for p in status["partitions"]]))
    else:
        out.append("no partitions yet")
    return "\n".join(out)


def _wait_for_exit(pid: int, path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        if not os.path.exists(path):
            return True
        time.sleep(0.1)
    return False


def _groups(args) -> int:
    from clients import groups_tool  # kazoo: only for this command

    try:
        zk_connect = value_from_file(args.config, "zk.connect", args.override)
    except ConfigError as exc:
        print(f"mpbroker-ctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not zk_connect:
        print(f"mpbroker-ctl: zk.connect is empty in {args.config}: consumer groups live in ZooKeeper, "
              "and this broker does not use one", file=sys.stderr)
        return EXIT_USAGE
    return groups_tool.main(["--zookeeper", zk_connect] + (["--group", args.group] if args.group else [])
                            + (["--json"] if args.json else []))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mpbroker-ctl", description="control a running mpbroker")
    parser.add_argument("-c", "--config", required=True, help="the broker's configuration file")
    parser.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE")
    commands = parser.add_subparsers(dest="command", required=True)
    status_parser = commands.add_parser("status", help="processes and partitions")
    status_parser.add_argument("--json", action="store_true", help="machine-readable output")
    shutdown_parser = commands.add_parser("shutdown", help="stop gracefully and wait until the broker exited")
    shutdown_parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait (default 180)")
    commands.add_parser("reload", help="re-read the configuration file (like SIGHUP)")
    groups_parser = commands.add_parser("groups", help="consumer groups and their lag (from zk.connect)")
    groups_parser.add_argument("--group", help="describe this group (members, owners, offsets, lag)")
    groups_parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.command == "groups":
        return _groups(args)
    try:
        path = control_socket_from_file(args.config, args.override)
    except ConfigError as exc:
        print(f"mpbroker-ctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        answer = call(path, args.command)
    except NotRunning as exc:
        print(f"mpbroker-ctl: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    except (OSError, ValueError) as exc:
        print(f"mpbroker-ctl: talking to {path} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not answer.get("ok"):
        print(f"mpbroker-ctl: {answer.get('error', 'the broker refused')}", file=sys.stderr)
        return EXIT_FAILED
    if args.command == "status":
        print(json.dumps(answer, indent=2) if args.json else format_status(answer))
    elif args.command == "shutdown":
        print(f"broker (pid {answer['pid']}) is stopping...", flush=True)
        if not _wait_for_exit(answer["pid"], path, args.timeout):
            print(f"mpbroker-ctl: the broker did not exit within {args.timeout:.0f}s", file=sys.stderr)
            return EXIT_FAILED
        print("stopped")
    elif args.command == "reload":
        print(f"applied: {', '.join(answer['applied']) or 'nothing'}")
        if answer["needs_restart"]:
            print(f"needs a restart: {', '.join(answer['needs_restart'])}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
