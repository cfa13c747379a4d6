"""``mpbroker-ctl``: talk to a running broker over its control socket.

    mpbroker-ctl [WHERE] status [--json]
    mpbroker-ctl [WHERE] shutdown [--timeout S]
    mpbroker-ctl [WHERE] reload
    mpbroker-ctl [WHERE] groups [--group G] [--json]

WHERE names the broker, before or after the command:

- ``--socket PATH``: its control socket;
- ``--log-dir DIR``: its log.dir (the socket is ``DIR/mpbroker.sock``, unless the
  configuration sets ``control.socket``);
- ``-c CONFIG`` and ``--override KEY=VALUE`` (repeatable): the configuration file and
  the overrides it was started with, as ``mpbroker serve`` took them;
- nothing: the one broker running on this machine, found by its listening control
  socket named ``mpbroker.sock`` (in ``/proc/net/unix``); with several, name one.

When there is no broker at the socket, the error names the path and why it was
looked at, and lists the brokers that are running.

``groups`` reads the consumer groups from ZooKeeper and prints what
``mpbroker-groups`` prints (the groups, or one group's owners, offsets and lag): the
ZooKeeper of ``zk.connect`` from -c/--override, else the one the running broker uses
(asked over its socket). It does not need the broker running when zk.connect is given.
Its messages are labelled ``mpbroker-ctl groups:``.

Exit codes: 0 done; 1 the broker refused or failed the command (or did not stop in
time; for ``groups``: no such group); 2 bad arguments or configuration, or several
brokers running and none named; 3 no broker answers on the socket (for ``groups``:
no ZooKeeper server answered).
"""

import argparse
import contextlib
import json
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass

from mpbroker.config.broker_config import setting_from_file
from mpbroker.config.errors import ConfigError
from mpbroker.config.keys import CONTROL_SOCKET_NAME
from mpbroker.control_client import NotRunning, call

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3
PROG = "mpbroker-ctl"
GROUPS_LABEL = "mpbroker-ctl groups"
PROC_NET_UNIX = "/proc/net/unix"
FOUND_RUNNING = "the only broker running on this machine"
LISTENING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags column


class Ambiguous(Exception):
    """No broker named, and more than one running."""


@dataclass(frozen=True)
class Target:
    """The control socket to talk to, and why that one (for messages)."""

    path: str
    why: str


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
                       f"{zookeeper['topics']} topics"
                       + (f", the controller (epoch {zookeeper['controller_epoch']})"
                          if zookeeper.get("controller_epoch") else ""))
        else:
            out.append("zookeeper: no report from the registrar yet")
        out.append("")
    kafka = status.get("kafka")
    if kafka:
        served = ", ".join(f"{name} {count}" for name, count in kafka["requests"].items() if count) or "none yet"
        out.append(f"kafka protocol: port {kafka['port']}, {kafka['connections_open']} connections open "
                   f"({kafka['connections_accepted']} accepted); requests: {served}")
        out.append("")
    metrics = status.get("metrics")
    if metrics:
        out.append(f"metrics: http://{metrics['host'] or '0.0.0.0'}:{metrics['port']}/metrics")
        out.append("")
    partitions = status["partitions"]
    if partitions:
        header = ["topic", "partition", "worker", "log_end", "flushed_end", "segments", "bytes", "msg/s"]
        rows = [[p["topic"], p["partition"], p["worker"], p["log_end"], p["flushed_end"], p["segments"],
                 p["bytes"], p["messages_per_s"]] for p in partitions]
        if any(p.get("role", "unreplicated") != "unreplicated" for p in partitions):
            header += ["role", "epoch", "hw", "isr"]
            for row, p in zip(rows, partitions):
                replicated = p["role"] != "unreplicated"
                row += [p["role"], p["leader_epoch"] if replicated else "-", p["high_watermark"] if replicated else "-",
                        ",".join(map(str, p["isr"])) if replicated else "-"]
        out.append(_table(header, rows))
    else:
        out.append("no partitions yet")
    return "\n".join(out)


def _wait_for_exit(pid: int, path: str, timeout: float) -> bool:
    """Whether the broker exited within ``timeout``: its process is gone (or a zombie, its
    exit not yet collected by its parent); a process this user may not signal is judged
    by its control socket's path instead. (The socket goes first, a moment before the
    exit: judging by it alone answered "stopped" while the broker still ran.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            if not os.path.exists(path):
                return True
        else:
            if _is_zombie(pid):
                return True
        time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


# --- which broker ----------------------------------------------------------------------

def running_control_sockets() -> list[str]:
    """The control sockets of the brokers running on this machine (in this network
    namespace) that this user may use: listening unix stream sockets bound to an
    absolute path named ``mpbroker.sock``, as the kernel lists them in /proc/net/unix,
    so a broker that died leaves nothing behind here."""
    try:
        with open(PROC_NET_UNIX) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    found = set()
    for line in lines:
        fields = line.split(None, 7)  # Num RefCount Protocol Flags Type St Inode Path
        if len(fields) < 8:
            continue
        flags, kind, path = fields[3], fields[4], fields[7]
        if int(kind, 16) != socket.SOCK_STREAM or not int(flags, 16) & LISTENING:
            continue
        if not os.path.isabs(path) or os.path.basename(path) != CONTROL_SOCKET_NAME:
            continue
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode) and os.access(path, os.W_OK):
                found.add(path)
        except OSError:
            continue
    return sorted(found)


def _overrides(args) -> list[str]:
    """Every override, from before and after the command; --log-dir last."""
    return args.override + getattr(args, "late_override", []) + ([f"log.dir={args.log_dir}"] if args.log_dir else [])


def locate(args) -> Target:
    """The control socket the options name (see the module's docstring). ConfigError
    for a configuration that cannot be read, Ambiguous for several running brokers."""
    if args.socket:
        return Target(args.socket, "given with --socket")
    overrides = _overrides(args)
    if args.config is None and not overrides:
        running = running_control_sockets()
        if len(running) == 1:
            return Target(running[0], FOUND_RUNNING)
        if len(running) > 1:
            raise Ambiguous(f"{len(running)} brokers are running on this machine (control sockets "
                            f"{', '.join(running)}): name one with --socket PATH, --log-dir DIR or -c CONFIG")
    explicit, origin = setting_from_file(args.config, "control.socket", overrides)
    if explicit:
        return Target(explicit, f"the control.socket {_origin_text(args, origin)}")
    log_dir, origin = setting_from_file(args.config, "log.dir", overrides)
    if origin == "default" and args.config is None:
        why = f"the socket in the default log.dir {log_dir} (no broker named, and none found running)"
    elif origin == "default":
        why = f"the socket in the default log.dir {log_dir} ({args.config} does not set log.dir)"
    else:
        why = f"the socket in log.dir {log_dir} {_origin_text(args, origin)}"
    return Target(os.path.join(log_dir, CONTROL_SOCKET_NAME), why)


def _origin_text(args, origin: str) -> str:
    if origin == "--override":
        return "from --log-dir" if args.log_dir else "from --override"
    return f"from {origin}"


def _not_running_help(target: Target) -> list[str]:
    """The lines after 'no broker is running': where ctl looked, and how to point it."""
    lines = [f"looked at {target.path}: {target.why}"]
    others = [path for path in running_control_sockets() if path != target.path]
    if others:
        lines.append(f"running on this machine: {', '.join(others)} (name one with --socket PATH)")
    lines.append("point mpbroker-ctl at the broker with --log-dir DIR (its log.dir), --socket PATH (its control "
                 "socket), or -c CONFIG with the same --override KEY=VALUE options mpbroker serve was given")
    return lines


def _fail(label: str, *lines: str) -> None:
    for line in lines:
        print(f"{label}: {line}", file=sys.stderr)


# --- groups --------------------------------------------------------------------------

@contextlib.contextmanager
def _groups_tool():
    """mpbroker.cli.groups, with its messages labelled as this command's."""
    from mpbroker.cli import groups as groups_tool  # kazoo: only for this command

    label = groups_tool.PROG
    groups_tool.PROG = GROUPS_LABEL
    try:
        yield groups_tool
    finally:
        groups_tool.PROG = label


def _zk_connect_of_running_broker(args) -> tuple[str, str]:
    """(the running broker's zk.connect, or "" and why there is none)."""
    try:
        target = locate(args)
    except Ambiguous as exc:
        return "", str(exc)
    try:
        status = call(target.path, "status")
    except NotRunning as exc:
        return "", f"no broker to ask for its own: {exc}"
    except (OSError, ValueError) as exc:
        return "", f"asking the broker at {target.path} failed: {exc}"
    zk_connect = status.get("zk_connect") or (status.get("zookeeper") or {}).get("zk_connect") or ""
    return zk_connect, "" if zk_connect else f"the broker at {target.path} does not use ZooKeeper"


def _groups(args) -> int:
    overrides = _overrides(args)
    try:
        zk_connect = setting_from_file(args.config, "zk.connect", overrides)[0]
        why_not = ""
        if not zk_connect:
            zk_connect, why_not = _zk_connect_of_running_broker(args)
    except ConfigError as exc:
        _fail(GROUPS_LABEL, str(exc))
        return EXIT_USAGE
    if not zk_connect:
        if args.config:
            given = f"in {args.config}"
        else:
            given = "in the --override options" if overrides else "(no -c or --override gives one)"
        _fail(GROUPS_LABEL, f"zk.connect is empty {given}, and {why_not}",
              "consumer groups live in ZooKeeper: give its connect string with "
              "--override zk.connect=HOST:PORT[/chroot]")
        return EXIT_USAGE
    with _groups_tool() as groups_tool:
        return groups_tool.main(["--zookeeper", zk_connect] + (["--group", args.group] if args.group else [])
                                + (["--json"] if args.json else []))


# --- the command line ----------------------------------------------------------------

def _add_where_options(parser, after_command: bool) -> None:
    """The options naming the broker; accepted before and after the command."""
    unset = argparse.SUPPRESS if after_command else None  # after the command: only when given
    parser.add_argument("-c", "--config", default=unset, metavar="CONFIG",
                        help="the broker's configuration file, as given to mpbroker serve")
    parser.add_argument("-o", "--override", action="append", dest="late_override" if after_command else "override",
                        default=argparse.SUPPRESS if after_command else [], metavar="KEY=VALUE",
                        help="an override the broker was started with (mpbroker serve --override), so the "
                             "same log.dir, control.socket or zk.connect are used (repeatable)")
    parser.add_argument("--log-dir", default=unset, metavar="DIR",
                        help="the broker's log.dir: its control socket is DIR/mpbroker.sock "
                             "(unless the configuration sets control.socket)")
    parser.add_argument("--socket", default=unset, metavar="PATH",
                        help="the broker's control socket itself (its control.socket)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="control a running mpbroker",
        epilog="Without --socket, --log-dir, -c or --override: the one broker running on this machine. "
               "Exit codes: 0 done, 1 the broker refused or failed the command (groups: no such group), "
               "2 bad arguments or configuration (or several brokers running and none named), "
               "3 no broker answers (groups: no ZooKeeper).")
    _add_where_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status_parser = commands.add_parser("status", help="processes and partitions")
    status_parser.add_argument("--json", action="store_true", help="machine-readable output")
    shutdown_parser = commands.add_parser("shutdown", help="stop gracefully and wait until the broker exited")
    shutdown_parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait (default 180)")
    reload_parser = commands.add_parser("reload", help="re-read the configuration file (like SIGHUP)")
    groups_parser = commands.add_parser(
        "groups", help="consumer groups and their lag (ZooKeeper: zk.connect of -c/--override, else the broker's own)")
    groups_parser.add_argument("--group", help="describe this group (members, owners, offsets, lag)")
    groups_parser.add_argument("--json", action="store_true", help="machine-readable output")
    for command_parser in (status_parser, shutdown_parser, reload_parser, groups_parser):
        _add_where_options(command_parser, after_command=True)
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "groups":
        return _groups(args)
    try:
        target = locate(args)
    except (ConfigError, Ambiguous) as exc:
        _fail(PROG, str(exc))
        return EXIT_USAGE
    path = target.path
    if args.command in ("shutdown", "reload") and target.why == FOUND_RUNNING:
        print(f"{PROG}: {args.command} of the broker at {path} ({target.why})", file=sys.stderr)
    try:
        answer = call(path, args.command)
    except NotRunning as exc:
        _fail(PROG, str(exc), *(_not_running_help(target) if exc.missing else ()))
        return EXIT_NOT_RUNNING
    except (OSError, ValueError) as exc:
        _fail(PROG, f"talking to {path} failed: {exc}")
        return EXIT_FAILED
    if not answer.get("ok"):
        _fail(PROG, answer.get("error", "the broker refused"))
        return EXIT_FAILED
    if args.command == "status":
        print(json.dumps(answer, indent=2) if args.json else format_status(answer))
    elif args.command == "shutdown":
        print(f"broker (pid {answer['pid']}) is stopping...", flush=True)
        if not _wait_for_exit(answer["pid"], path, args.timeout):
            _fail(PROG, f"the broker did not exit within {args.timeout:.0f}s")
            return EXIT_FAILED
        print("stopped")
    elif args.command == "reload":
        print(f"applied: {', '.join(answer['applied']) or 'nothing'}")
        if answer["needs_restart"]:
            print(f"needs a restart: {', '.join(answer['needs_restart'])}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
